package main

import (
	"fmt"
	"os"

	"berth.dev/berth/sandbox"
	"berth.dev/berth/sandbox/containerd"
	"berth.dev/berth/sandbox/kube"
)

// The --kube modes: how berth reaches Kubernetes pods.
const (
	kubeAuto = "auto" // API mode when in a cluster or $KUBECONFIG is set
	kubeAPI  = "api"  // pod exec through the API server (a Deployment)
	kubeNode = "node" // this node's containerd (a DaemonSet node agent)
	kubeOff  = "off"
)

// newKube returns the provider of kube:// references for --kube, or nil
// when pods are off (or auto finds no cluster). In node mode it serves them
// through ctrd, the node's containerd.
func newKube(g *globalFlags, ctrd *containerd.Provider) (sandbox.Provider, error) {
	switch g.kube {
	case kubeOff:
		return nil, nil
	case kubeNode:
		if ctrd == nil {
			return nil, fmt.Errorf("berth: --kube node reaches pods through the node's containerd, and none is configured: mount the node's containerd socket and pass --containerd-address")
		}
		if len(g.kubeNamespaces) > 0 {
			return nil, fmt.Errorf("berth: --kube-namespaces applies to --kube api; a node agent serves the pods of its node")
		}
		return ctrd.Pods(g.nodeName), nil
	case kubeAPI, kubeAuto, "":
		if g.kube != kubeAPI && !inCluster() && os.Getenv("KUBECONFIG") == "" {
			return nil, nil
		}
		p, err := kube.New(kube.WithNamespaces(g.kubeNamespaces...))
		if err != nil {
			if g.kube != kubeAPI {
				return unavailable{scheme: sandbox.PodScheme, err: err}, nil
			}
			return nil, fmt.Errorf("berth: --kube api: %w", err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("berth: --kube %q: use api, node, off or auto", g.kube)
}

// inCluster reports whether berth runs in a Kubernetes pod (the kubelet
// sets KUBERNETES_SERVICE_HOST in every container).
func inCluster() bool { return os.Getenv("KUBERNETES_SERVICE_HOST") != "" }

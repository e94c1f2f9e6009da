//go:build tools

// Package kbuild pins the Kubernetes programs tests/kube builds from source,
// all of k8s.io/kubernetes v1.37.2: the API server, the kubelet, kubectl,
// and the scheduler and controller manager that DaemonSets and Deployments
// need.
package kbuild

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)

// Package kube is the Kubernetes backend of package sandbox in API mode:
// berth talks to the cluster's API server only. It opens a container of an
// existing, running pod ("kube://NAMESPACE/POD[/CONTAINER]"), places its
// agent (sandbox/shim) there through a pod exec, and runs every process,
// file session and Dial relay as an exec session through the API server
// (WebSocket, falling back to SPDY). It needs no access to the node, only
// the RBAC rules of [Rules]: pods get and list, pods/exec create. It never
// creates, changes or deletes a pod.
//
// Node-agent mode serves the same references differently: berth runs on the
// node, as root, and reaches the pod's containers through the node's
// containerd socket (namespace k8s.io), which is package sandbox/containerd.
// It avoids the API server and the kubelet on every call, and needs no
// Kubernetes credentials, but must run on each node.
//
// # Credentials
//
// [New] takes the cluster from [WithRESTConfig] or [WithKubeconfig]; else
// from $KUBECONFIG when it is set; else, inside a pod, from the pod's
// service account (in-cluster); else from ~/.kube/config. It does not
// contact the API server: berth starts without a cluster, and the first
// Open or Locate reports an unreachable one as sandbox.ErrGone.
//
// # What a pod exec cannot do
//
// A pod exec runs a program as the container's user, in the container's
// working directory and environment. Every exec runs under a small sh
// wrapper, which applies Cmd.Env and Cmd.Dir and keeps the session's
// output open until the agent reported the exit status (see wrapScript), so
// the container needs sh. Cmd.User is not supported (the error wraps
// sandbox.ErrUnsupported): set the pod's securityContext instead.
package kube

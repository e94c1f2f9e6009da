package kube

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
)

// podClient is the part of the core/v1 API berth uses: get and list pods,
// and the URL of a pod's exec subresource. It is a REST client over a
// scheme of core/v1 alone, instead of client-go's typed core client, which
// links the clientset's scheme of every API group and registers all of them
// when any berth command starts (a third of its start-up, measured with
// GODEBUG=inittrace=1).
type podClient struct {
	rc     rest.Interface
	params runtime.ParameterCodec // encodes list and exec options as query parameters
}

// podScheme is the scheme of core/v1 (with meta/v1's options and Status),
// built on first use.
var podScheme = sync.OnceValues(func() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
})

// newPodClient returns a client of the core/v1 API at cfg.
func newPodClient(cfg *rest.Config) (*podClient, error) {
	s, err := podScheme()
	if err != nil {
		return nil, err
	}
	c := rest.CopyConfig(cfg)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	c.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, err
	}
	return &podClient{rc: rc, params: runtime.NewParameterCodec(s)}, nil
}

// get returns the pod ns/name.
func (c *podClient) get(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.rc.Get().Namespace(ns).Resource("pods").Name(name).Do(ctx).Into(pod)
	if err != nil {
		return nil, err
	}
	return pod, nil
}

// list returns the pods of ns (every namespace when ns is
// metav1.NamespaceAll) that match the label selector.
func (c *podClient) list(ctx context.Context, ns, selector string) (*corev1.PodList, error) {
	list := &corev1.PodList{}
	err := c.rc.Get().Namespace(ns).Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: selector}, c.params).
		Do(ctx).Into(list)
	if err != nil {
		return nil, err
	}
	return list, nil
}

// execRequest returns the request of an exec session in a pod's container.
func (c *podClient) execRequest(ns, pod string, opts *corev1.PodExecOptions) *rest.Request {
	return c.rc.Post().Namespace(ns).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(opts, c.params)
}

package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"berth.dev/berth/controller"
	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/runstore"
	"berth.dev/berth/runstore/kubestore"
	"berth.dev/berth/sandbox/kube"
)

// The --store kinds.
const (
	storeDir  = "dir"  // runstore.Dir in --state-dir: one berth
	storeKube = "kube" // runstore/kubestore: several replicas on Kubernetes
)

// Environment variables a pod's downward API sets for --store kube.
const (
	envPodName      = "POD_NAME"
	envPodNamespace = "POD_NAMESPACE"
	envPodIP        = "POD_IP"
)

// namespaceFile names the namespace of the pod's service account.
const namespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// replicaFlags configure --store kube.
type replicaFlags struct {
	namespace   string // --store-namespace
	replica     string // --replica
	advertise   string // --advertise
	peerKeyFile string // --peer-key-file
}

// replicated is berth as one replica of several: the run store in the
// cluster, the leases in it, and the peer identity requests are forwarded
// with.
type replicated struct {
	store *kubestore.Store
	peer  *httpapi.Peer
	// ctl receives lost leases once the controller exists.
	ctl atomic.Pointer[controller.Controller]
}

// openReplicated opens the run store of --store kube; ln is where this
// replica serves (for --advertise's default).
func openReplicated(f replicaFlags, ln net.Listener, log *slog.Logger) (*replicated, error) {
	if f.peerKeyFile == "" {
		return nil, errors.New("berth: --store kube forwards requests between replicas and needs --peer-key-file, a key of at least 32 bytes all replicas share (openssl rand -hex 32)")
	}
	key, err := os.ReadFile(f.peerKeyFile)
	if err != nil {
		return nil, fmt.Errorf("berth: --peer-key-file: %w", err)
	}
	replica := cmp.Or(f.replica, os.Getenv(envPodName))
	if replica == "" {
		replica, _ = os.Hostname()
	}
	peer, err := httpapi.NewPeer(replica, []byte(strings.TrimSpace(string(key))))
	if err != nil {
		return nil, fmt.Errorf("berth: --replica/--peer-key-file: %w", err)
	}
	ns := cmp.Or(f.namespace, os.Getenv(envPodNamespace))
	if ns == "" {
		if b, err := os.ReadFile(namespaceFile); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns == "" {
		return nil, fmt.Errorf("berth: --store kube needs the namespace to keep runs in: pass --store-namespace or set $%s", envPodNamespace)
	}
	addr, err := advertised(f.advertise, ln)
	if err != nil {
		return nil, err
	}
	cfg, source, err := kube.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("berth: --store kube: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		// client-go's default (5 per second) would hold back the lookups
		// of runs other replicas serve, and lease renewals of many runs.
		cfg.QPS, cfg.Burst = 50, 100
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("berth: --store kube: a client for %s (from %s): %w", cfg.Host, source, err)
	}
	rp := &replicated{peer: peer}
	st, err := kubestore.New(cs, ns, replica, kubestore.Options{
		Address: addr,
		Logger:  log,
		// Records are sealed with a key derived from the peer key, which
		// the records' Secrets do not hold: whoever may write those
		// cannot forge a record without reading the peer key too.
		Key: runstore.DeriveKey(peer.Key),
		OnLost: func(id string) {
			if c := rp.ctl.Load(); c != nil {
				c.Lost(id)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("berth: --store kube: %w", err)
	}
	// A first look, so that missing permissions fail now and say so.
	if _, _, err := st.List(context.Background()); err != nil {
		st.Close()
		return nil, fmt.Errorf("berth: --store kube: cannot list the run records in namespace %s (grant the Role of k8s/rbac/store to berth's service account): %w", ns, err)
	}
	rp.store = st
	log.Info("run store: Kubernetes", "namespace", ns, "replica", replica, "advertise", addr, "cluster", cfg.Host)
	return rp, nil
}

// advertised is --advertise, or http://$POD_IP:PORT with ln's port.
func advertised(flag string, ln net.Listener) (string, error) {
	if flag != "" {
		u, err := url.Parse(flag)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return "", fmt.Errorf("berth: --advertise %q: give the URL other replicas reach this one at, such as http://10.0.0.7:8080", flag)
		}
		return strings.TrimSuffix(flag, "/"), nil
	}
	ip := os.Getenv(envPodIP)
	if ip == "" {
		return "", fmt.Errorf("berth: --store kube needs the address other replicas reach this one at: pass --advertise, or set $%s (the pod's IP, from the downward API)", envPodIP)
	}
	_, port, err := net.SplitHostPort(ln.Addr().String())
	if err != nil {
		return "", fmt.Errorf("berth: --advertise: the listening address %s: %w", ln.Addr(), err)
	}
	return "http://" + net.JoinHostPort(ip, port), nil
}

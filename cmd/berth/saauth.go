package main

import (
	"fmt"
	"os"

	"k8s.io/client-go/kubernetes"

	"berth.dev/berth/controller/httpapi"
	"berth.dev/berth/kubeauth"
	"berth.dev/berth/sandbox/kube"
)

// serviceAccounts is --service-accounts-file: the mapped service accounts
// and the reviewer that verifies their tokens.
type serviceAccounts struct {
	mappings []kubeauth.Mapping
	reviewer *kubeauth.Reviewer
}

// loadServiceAccounts reads the mappings file and connects the reviewer
// to the cluster berth's kube client finds (in-cluster, $KUBECONFIG).
func loadServiceAccounts(file, audience string) (*serviceAccounts, error) {
	fh, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("berth: --service-accounts-file: %w", err)
	}
	defer fh.Close()
	maps, err := kubeauth.ParseMappings(fh)
	if err != nil {
		return nil, fmt.Errorf("berth: --service-accounts-file %s: %w", file, err)
	}
	cfg, source, err := kube.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("berth: --service-accounts-file verifies tokens with the API server: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("berth: --service-accounts-file: a client for %s (from %s): %w", cfg.Host, source, err)
	}
	r, err := kubeauth.New(cs, maps, kubeauth.Options{Audience: audience})
	if err != nil {
		return nil, fmt.Errorf("berth: --service-accounts-file: %w", err)
	}
	return &serviceAccounts{mappings: maps, reviewer: r}, nil
}

// credentials are the mapped service accounts as credentials without a
// token, for what counts tenants and describes the credentials at start.
func (a *serviceAccounts) credentials() []httpapi.Credential {
	if a == nil {
		return nil
	}
	out := make([]httpapi.Credential, len(a.mappings))
	for i, m := range a.mappings {
		out[i] = httpapi.Credential{Tenant: m.Tenant, Scopes: m.Scopes, Subject: m.Username()}
	}
	return out
}

// authenticator is the reviewer, or nil without --service-accounts-file.
func (a *serviceAccounts) authenticator() httpapi.Authenticator {
	if a == nil {
		return nil
	}
	return a.reviewer
}

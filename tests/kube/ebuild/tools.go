//go:build tools

// Package ebuild pins the etcd server tests/kube builds from source: the
// main package of go.etcd.io/etcd/server/v3 v3.7.3.
package ebuild

import _ "go.etcd.io/etcd/server/v3"

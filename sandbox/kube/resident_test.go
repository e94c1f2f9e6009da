package kube

import "berth.dev/berth/sandbox"

// A pod's sandbox keeps residents through berth's agent like every shim
// backend. Not exercised against a cluster here: a CRI runtime may kill an
// exec's process when its stream closes, which would end the resident's
// keeper (and with it the resident) when berth goes away.
var _ sandbox.Residence = (*Sandbox)(nil)

package dirfs

// UseOpenat2 turns the openat2 read path on or off (off: reads go through
// os.Root) and returns a function restoring the previous setting.
func UseOpenat2(on bool) (restore func()) {
	old := noOpenat2.Load()
	noOpenat2.Store(!on)
	return func() { noOpenat2.Store(old) }
}

// Openat2Available reports whether reads still use openat2 (it is turned off
// for good the first time the kernel refuses it).
func Openat2Available() bool { return !noOpenat2.Load() }

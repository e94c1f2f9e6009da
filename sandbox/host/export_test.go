package host

// NewWithoutCgroup is New as on a machine without control groups, for the
// tests of the rlimit fallback.
func NewWithoutCgroup(opts Options) *Sandbox { return newSandbox(opts, false) }

// CgroupDirs are the sandbox's control group directories, none without one.
func (s *Sandbox) CgroupDirs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cg == nil {
		return nil
	}
	return append([]string(nil), s.cg.dirs...)
}

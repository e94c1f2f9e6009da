package structural

// SetSnapshotBytes lowers MaxSnapshotBytes for a test and returns the
// function that puts it back.
func SetSnapshotBytes(n int) (reset func()) {
	old := snapshotBytes
	snapshotBytes = n
	return func() { snapshotBytes = old }
}

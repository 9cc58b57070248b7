//go:build !unix

package sqlite

// lockFile takes no lock where flock(2) is missing: there, two servers on
// one file are not refused, only unsupported.
func lockFile(string) (func() error, error) { return func() error { return nil }, nil }

//go:build !failpoints

package failpoint

// Enabled reports whether failpoints are compiled in.
const Enabled = false

// Inject does nothing in release builds.
func Inject(string) error { return nil }

//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Inject is a no-op in a normal build.
func Inject(string) error { return nil }

// Armed is false in a normal build: no point is ever armed.
func Armed(string) bool { return false }

//go:build !unix

package sqlite

import "context"

// lockFile is a no-op where flock is missing: replicas on one file must then
// not start together (run `migrate` first).
func lockFile(context.Context, string) (func(), error) { return func() {}, nil }

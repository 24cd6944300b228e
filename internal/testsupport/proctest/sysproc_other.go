//go:build !linux

package proctest

import "syscall"

// sysProcAttr puts the process in its own group, so that a kill of the group
// reaches everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

package proctest

import "syscall"

// sysProcAttr puts the process in its own group, so that a kill of the group
// reaches everything it started, and kills it with the test binary should that
// die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

package realmodel

import "syscall"

// procAttr makes the kernel kill the host when the test process dies, so a
// crashed test leaves no host behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

package demo

import "syscall"

// sysProcAttr keeps children out of the terminal's process group (Ctrl-C is
// ours to handle, in order) and kills them if the demo itself dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

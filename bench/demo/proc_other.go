//go:build !linux

package demo

import "syscall"

// sysProcAttr keeps children out of the terminal's process group.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

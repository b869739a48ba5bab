//go:build !linux

package realmodel

import "syscall"

// procAttr sets nothing where the kernel has no parent-death signal: Close
// stops the host.
func procAttr() *syscall.SysProcAttr { return nil }

//go:build !linux

package h1

import "syscall"

// rawSockets: sock goes through the net.Conn; only conn's and Body.Each's
// reads, which the runtime's poller waits for, use rawRead.
const rawSockets = false

// rawRead is read(2): the raw system calls are Linux's (sock_linux.go).
func rawRead(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

func rawWrite(fd int, p []byte) (int, error) { return syscall.Write(fd, p) }

func rawWritev(int, []syscall.Iovec) (int, error) { return 0, syscall.ENOSYS }

// ConnectEarly does nothing here: the dialer connects (see sock_linux.go).
func ConnectEarly(string, string, syscall.RawConn) error { return nil }

package agent

import (
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// modeSupervise is the mode the keeper starts the supervisor in: "run"
// with its flags and program, one process further down.
const modeSupervise = "run-supervised"

// sweepTimeout bounds how long the keeper kills and reaps what its
// supervisor left behind.
const sweepTimeout = 5 * time.Second

// keep is "run" mode's outer process, the keeper: it starts the
// supervisor ("run-supervised", the same flags and program) as its only
// child, lets go of the exec's stdio, and waits. It exists because a
// process started by an exec has no parent inside the container's PID
// namespace: when the supervisor is killed (kill -9, the OOM killer), what
// it started is reparented to the container's PID 1, which often never
// reaps, and stays as zombies, or — a kernel that ignores its stdin — alive
// for good. The keeper is a subreaper, so the supervisor's orphans come to
// it instead: when the supervisor ends, it kills every process left,
// reaps them all, and exits with the supervisor's status. Its own parent
// (the engine, or berth on the host) reaps it.
//
// The supervisor gets SIGTERM when the keeper dies (its parent-death
// signal) and then ends its program as when berth goes away; the program
// gets SIGKILL when the supervisor dies.
func keep(args []string) int { return keepChild(modeSupervise, "run", args, false, nil) }

// keepChild is the keeper of a child started as "berth-shim childMode
// args...". label names the mode in messages. With detach the keeper
// first clears its own parent-death signal, so that it and its child
// outlive the berth that started them (the resident mode). after, when
// set, runs once the child ended and its orphans were swept, with the
// child's status.
func keepChild(childMode, label string, args []string, detach bool, after func(syscall.WaitStatus)) int {
	if detach {
		syscall.RawSyscall(syscall.SYS_PRCTL, prSetPdeathsig, 0, 0)
	}
	// The parent-death signal is tied to the thread that started the
	// child: keep that thread for the keeper's whole life.
	runtime.LockOSThread()
	runtime.GOMAXPROCS(1)
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	signal.Ignore(syscall.SIGPIPE)

	self, err := os.Executable()
	if err != nil {
		self = "/proc/self/exe"
	}
	child, err := os.StartProcess(self, append([]string{self, childMode}, args...), &os.ProcAttr{
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "berth-shim %s: start the supervisor: %v\n", label, err)
		return 1
	}
	// The stream ends with the supervisor's tree, not with the keeper.
	releaseStdio()
	go func() { // ends with the process
		for sig := range sigs {
			child.Signal(sig)
		}
	}()

	var status syscall.WaitStatus
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break // ECHILD: nothing left
		}
		if pid == child.Pid && (ws.Exited() || ws.Signaled()) {
			status = ws
			if detach {
				settle(orphanSettle)
			}
			sweep()
			if after != nil {
				after(ws)
			}
			break
		}
	}
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

// orphanSettle bounds how long a resident's keeper lets the supervisors
// its resident left end by themselves (their parent-death signal is
// SIGTERM: each ends its program, within its wait delay, and removes the
// program's paths, "run --remove") before it kills what is left.
const orphanSettle = 10 * time.Second

// settle reaps the keeper's children as they end, until none is left or
// d passed.
func settle(d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return // ECHILD: all ended
		case pid <= 0:
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// sweep kills every child of the keeper left after its supervisor ended
// (its program and their orphans, reparented here) with their process
// groups, until none is left, and reaps them, within sweepTimeout.
func sweep() {
	self := os.Getpid()
	deadline := time.Now().Add(sweepTimeout)
	for time.Now().Before(deadline) {
		parent, zombie := procTable()
		left := 0
		for pid, ppid := range parent {
			if ppid != self || pid == self {
				continue
			}
			left++
			if !zombie[pid] {
				if pgid, err := syscall.Getpgid(pid); err == nil && pgid > 1 && pgid != syscall.Getpgrp() {
					syscall.Kill(-pgid, syscall.SIGKILL)
				}
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err != nil {
				return // ECHILD: every child is reaped
			}
			if pid <= 0 {
				break
			}
		}
		if left == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// releaseStdio points descriptors 0, 1 and 2 at /dev/null.
func releaseStdio() {
	null, err := syscall.Open("/dev/null", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		for fd := 0; fd <= 2; fd++ {
			syscall.Close(fd)
		}
		return
	}
	for fd := 0; fd <= 2; fd++ {
		syscall.Dup3(null, fd, 0)
	}
	syscall.Close(null)
}

package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stateFile records, in the cluster's directory, every process `up` started,
// so that `down` stops exactly those and nothing else.
const stateFile = "processes.json"

// Process is one component process of the local cluster.
type Process struct {
	Name   string   `json:"name"`
	Binary string   `json:"binary"`
	Args   []string `json:"args"`
	PID    int      `json:"pid"`

	cmd    *exec.Cmd
	exited chan struct{}
}

type state struct {
	Processes []*Process `json:"processes"`
}

func readState(dir string) (*state, error) {
	var s state
	return &s, readJSON(filepath.Join(dir, stateFile), &s)
}

// readJSON decodes a record this package wrote, naming the file on error.
func readJSON(path string, v any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func writeState(dir string, procs []*Process) error {
	data, err := json.MarshalIndent(state{Processes: procs}, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// spawn starts a component with its output in dir/logs/NAME.log. Each runs
// in its own session so a Ctrl-C at the terminal reaches only `up`, which
// then stops the components in order. When the cluster is not detached, the
// kernel kills the component if the process that started it dies, so a
// crashed test run leaves nothing behind.
func spawn(dir string, detached bool, name, binary string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, "logs", name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !detached {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Binary: binary, Args: args, PID: cmd.Process.Pid, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// alive reports whether the process still runs and is still the one
// recorded: a PID reused by another program is not ours to stop.
func (p *Process) alive() bool {
	if p.exited != nil {
		select {
		case <-p.exited:
			return false
		default:
			return true
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.PID))
	if err != nil {
		return false
	}
	// A zombie has ended; whoever reaps it is not our concern.
	if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
		return false
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.PID))
	if errors.Is(err, fs.ErrNotExist) {
		// Between releasing its memory and becoming a zombie an exiting
		// process has no exe link but is still there (closing its files):
		// it ends in a moment, and down must wait for that.
		_, err := os.Stat(fmt.Sprintf("/proc/%d", p.PID))
		return err == nil
	}
	if err != nil {
		return false
	}
	exe = strings.TrimSuffix(exe, " (deleted)")
	want, err := filepath.Abs(p.Binary)
	if err != nil {
		return false
	}
	if resolved, err := filepath.EvalSymlinks(want); err == nil {
		want = resolved
	}
	return exe == want
}

// stop sends SIGTERM, waits up to grace, then SIGKILLs.
func (p *Process) stop(grace time.Duration) error {
	if !p.alive() {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if waitGone(ctx, p) {
		return nil
	}
	_ = syscall.Kill(p.PID, syscall.SIGKILL)
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if waitGone(ctx2, p) {
		return nil
	}
	return fmt.Errorf("%s (pid %d) did not stop", p.Name, p.PID)
}

func waitGone(ctx context.Context, p *Process) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if !p.alive() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// stopAll stops processes in the reverse of their start order.
func stopAll(procs []*Process) error {
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(15 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Stop stops every process recorded in dir by Start and removes the record.
// It is what `rampart down` does.
func Stop(dir string) error {
	s, err := readState(dir)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no local cluster recorded in %s (no %s)", dir, stateFile)
	}
	if err != nil {
		return err
	}
	if err := stopCluster(dir, s.Processes); err != nil {
		return err
	}
	return os.Remove(filepath.Join(dir, stateFile))
}

// Running lists the recorded processes of dir that still run.
func Running(dir string) ([]*Process, error) {
	s, err := readState(dir)
	if err != nil {
		return nil, err
	}
	var out []*Process
	for _, p := range s.Processes {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out, nil
}

func (p *Process) String() string { return p.Name + " (pid " + strconv.Itoa(p.PID) + ")" }

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// nodeProc is one node program (../tsnode) in its own process, spoken to in JSON lines.
type nodeProc struct {
	name   string
	bin    string
	log    string
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan []byte // stdout, one JSON line each; closed at EOF
	exited chan error

	Version string `json:"version"`
	IP      string `json:"ip"`
	Key     string `json:"key"`
	Relay   string `json:"relay"`
}

// startNode starts bin as node name against the control server, with env added to ours.
func startNode(name, bin, work, controlURL string, env []string) (*nodeProc, error) {
	dir := filepath.Join(work, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	n := &nodeProc{name: name, bin: bin, log: filepath.Join(work, name+".log"),
		lines: make(chan []byte, 16), exited: make(chan error, 1)}
	logf, err := os.Create(n.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	n.cmd = exec.Command(bin, "--control", controlURL, "--dir", dir, "--hostname", name)
	// STATE_DIRECTORY: where logpolicy looks before it makes /var/lib/tailscale.
	n.cmd.Env = append(append(os.Environ(), env...), "STATE_DIRECTORY="+dir)
	n.cmd.Stderr = logf
	if n.in, err = n.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := n.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<16), 1<<22)
		for sc.Scan() {
			n.lines <- append([]byte(nil), sc.Bytes()...)
		}
		close(n.lines)
		n.exited <- n.cmd.Wait()
	}()
	return n, nil
}

// next is the node's next line, within bound (a bound for a hang: the node gives its own,
// shorter, deadlines to what may legitimately fail).
func (n *nodeProc) next(bound time.Duration) ([]byte, error) {
	select {
	case line, ok := <-n.lines:
		if !ok {
			return nil, fmt.Errorf("%s closed its output; log %s", n.name, n.log)
		}
		return line, nil
	case <-time.After(bound):
		return nil, fmt.Errorf("%s said nothing for %v; log %s", n.name, bound, n.log)
	}
}

// waitReady reads the node's {"ready": ...} line.
func (n *nodeProc) waitReady() error {
	line, err := n.next(3 * time.Minute)
	if err != nil {
		return err
	}
	var r struct {
		Ready *nodeProc `json:"ready"`
	}
	r.Ready = n
	if err := json.Unmarshal(line, &r); err != nil {
		return fmt.Errorf("%s: ready line %q: %v", n.name, line, err)
	}
	if n.IP == "" || n.Key == "" {
		return fmt.Errorf("%s: ready line %q lacks ip or key", n.name, line)
	}
	return nil
}

// call sends one request and decodes the answer into resp; a node error is returned as one.
func (n *nodeProc) call(req map[string]any, resp any) error {
	if err := n.request(req); err != nil {
		return err
	}
	return n.answer(resp)
}

// request sends one request; answer reads the answer (requests are answered in order).
func (n *nodeProc) request(req map[string]any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := n.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: writing request: %v", n.name, err)
	}
	return nil
}

func (n *nodeProc) answer(resp any) error {
	line, err := n.next(10 * time.Minute)
	if err != nil {
		return err
	}
	var status struct {
		OK  bool   `json:"ok"`
		Err string `json:"err"`
	}
	if err := json.Unmarshal(line, &status); err != nil {
		return fmt.Errorf("%s: answer %q: %v", n.name, line, err)
	}
	if resp != nil {
		if err := json.Unmarshal(line, resp); err != nil {
			return fmt.Errorf("%s: answer %q: %v", n.name, line, err)
		}
	}
	if !status.OK {
		return &nodeError{n.name, status.Err}
	}
	return nil
}

type nodeError struct{ node, msg string }

func (e *nodeError) Error() string { return e.node + ": " + e.msg }

// stop closes the node's input (it closes tsnet and exits) and waits, bounded, then kills it.
func (n *nodeProc) stop() error {
	n.in.Close()
	done := make(chan error, 1)
	go func() {
		for range n.lines { // what it still writes is of no interest now
		}
		done <- <-n.exited
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		n.cmd.Process.Kill()
		return errors.New(n.name + " did not exit within 30s of the end of its input")
	}
}

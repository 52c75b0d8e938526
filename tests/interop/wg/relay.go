package main

// The relay under test: hderp-wgrelay started on port 0 with a peers file, its stderr kept for
// the checks, its /metrics read back, stopped by PID with SIGTERM.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

type relay struct {
	cmd       *exec.Cmd
	addr      netip.AddrPort // the UDP port the peers use
	metrics   string         // host:port of /metrics
	peersPath string
	mu        sync.Mutex
	stderr    bytes.Buffer
	done      chan error
}

func startRelay(bin, dir, peers string, extra ...string) (*relay, error) {
	r := &relay{peersPath: filepath.Join(dir, "peers"), done: make(chan error, 1)}
	if err := os.WriteFile(r.peersPath, []byte(peers), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--peers",
		r.peersPath}, extra...)
	r.cmd = exec.Command(bin, args...)
	out, err := r.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errp, err := r.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := r.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := errp.Read(buf)
			r.mu.Lock()
			r.stderr.Write(buf[:n])
			r.mu.Unlock()
			os.Stderr.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		r.cmd.Process.Kill()
		return nil, fmt.Errorf("relay exited before listening: %v (%s)", err, r.logs())
	}
	go func() { io.Copy(io.Discard, out); r.done <- r.cmd.Wait() }()
	// "wgrelay: listening on 127.0.0.1:PORT metrics 127.0.0.1:PORT"
	f := strings.Fields(line)
	if len(f) != 6 || f[4] != "metrics" {
		return nil, fmt.Errorf("unexpected first line %q", line)
	}
	if r.addr, err = netip.ParseAddrPort(f[3]); err != nil {
		return nil, err
	}
	r.metrics = f[5]
	return r, nil
}

func (r *relay) logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stderr.String()
}

// metric returns a counter's value ("name" or `name{reason="x"}`).
func (r *relay) metric(name string) (uint64, error) {
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(body), "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			return strconv.ParseUint(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s in:\n%s", name, body)
}

func (r *relay) metricsText() string {
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		fail("metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

func (r *relay) drop(reason string) uint64 {
	v, err := r.metric(`wgrelay_dropped_total{reason="` + reason + `"}`)
	if err != nil {
		fail("metrics: %v", err)
	}
	return v
}

func (r *relay) counter(name string) uint64 {
	v, err := r.metric(name)
	if err != nil {
		fail("metrics: %v", err)
	}
	return v
}

// waitMetric polls until cond(value) holds or the deadline passes.
func (r *relay) waitDrop(reason string, min uint64, what string) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v := r.drop(reason)
		if v >= min {
			logf("%s: dropped{%s} = %d", what, reason, v)
			return
		}
		if time.Now().After(deadline) {
			fail("%s: dropped{%s} stayed at %d (want >= %d)", what, reason, v, min)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *relay) reload(peers string) {
	if err := os.WriteFile(r.peersPath, []byte(peers), 0o600); err != nil {
		fail("%v", err)
	}
	r.cmd.Process.Signal(syscall.SIGHUP)
}

// stop sends SIGTERM and requires exit status 0.
func (r *relay) stop() error {
	r.cmd.Process.Signal(syscall.SIGTERM)
	err := <-r.done
	if err != nil {
		return fmt.Errorf("relay exit: %v", err)
	}
	return nil
}

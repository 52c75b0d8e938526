// Command tspair is the tailscaled interop test (issue 23): two Tailscale nodes (../tsnode, each a
// tsnet.Server in its own process, possibly of another tailscale.com version) joined by
// Tailscale's own test control server (tstest/integration/testcontrol, in this process) whose
// DERP map has one region: hderp-server on loopback. Direct paths are off in the nodes
// (TS_DEBUG_ALWAYS_USE_DERP), so everything between them goes through hderp. It checks:
//
//   - hderp counts both nodes as home connections (their NotePreferred);
//   - disco and TSMP pings both ways; the disco pong came over DERP (region of hderp, no
//     endpoint), and each node sees the other with no direct address;
//   - --bytes of pseudo-random data over TCP each way with SHA-256 sums equal at both ends, and
//     hderp-server's derp_bytes_received / derp_bytes_sent grew by at least that much;
//   - once hderp-server is stopped (SIGTERM, by PID), no ping is answered and no byte reaches
//     the other node's sink;
//   - hderp-server started again on the same port: both nodes come back to it by themselves,
//     and pings and a transfer each way pass through it again.
//
// Exit 0 when all hold, 1 otherwise (with the logs' paths), 2 for bad usage.
package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"tailscale.com/tailcfg"
	"tailscale.com/tstest/integration/testcontrol"
)

// regionID and regionCode name hderp's region in the DERP map (the only one).
const (
	regionID   = 900
	regionCode = "hderp"
)

type config struct {
	hderpBin string
	nodeA    string
	nodeB    string
	work     string
	plain    bool
	wantA    string
	wantB    string
	bytes    int64
}

func main() {
	var c config
	flag.StringVar(&c.hderpBin, "hderp", "", "hderp-server binary")
	flag.StringVar(&c.nodeA, "node-a", "", "node program for node a")
	flag.StringVar(&c.nodeB, "node-b", "", "node program for node b (default: --node-a)")
	flag.StringVar(&c.work, "work", "", "work directory (logs, state): new, empty or an "+
		"earlier run's (then emptied first)")
	flag.BoolVar(&c.plain, "plain", false, "DERP over plain HTTP (TS_DEBUG_USE_DERP_HTTP=1) "+
		"instead of TLS with a test CA")
	flag.StringVar(&c.wantA, "want-a", "", "fail unless node a is built with this tailscale.com "+
		"version (e.g. v1.102.5)")
	flag.StringVar(&c.wantB, "want-b", "", "the same for node b")
	flag.Int64Var(&c.bytes, "bytes", 64<<20, "bytes to send each way")
	flag.Parse()
	if c.hderpBin == "" || c.nodeA == "" || c.work == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: tspair --hderp BIN --node-a BIN [--node-b BIN] --work DIR "+
			"[--plain] [--want-a V] [--want-b V] [--bytes N]")
		os.Exit(2)
	}
	if c.nodeB == "" {
		c.nodeB = c.nodeA
	}
	if err := run(c); err != nil {
		fmt.Printf("FAIL: %v\n", err)
		if _, serr := os.Stat(filepath.Join(c.work, workMark)); serr == nil {
			fmt.Printf("(logs in %s)\n", c.work)
		}
		os.Exit(1)
	}
	fmt.Println("PASS")
}

// world is what run starts: stopped by PID (processes) or closed, whatever happens.
type world struct {
	hd      *hderp
	control *httptest.Server
	a, b    *nodeProc
}

func (w *world) close() {
	for _, n := range []*nodeProc{w.a, w.b} {
		if n != nil {
			if err := n.stop(); err != nil {
				fmt.Printf("note: %s: %v\n", n.name, err)
			}
		}
	}
	if w.hd != nil {
		w.hd.kill() // by PID; a no-op error once it has exited
	}
	if w.control != nil {
		w.control.Close()
	}
}

func run(c config) error {
	if err := prepareWork(c.work); err != nil {
		return err
	}
	certdir := filepath.Join(c.work, "certs")
	if err := os.MkdirAll(certdir, 0o700); err != nil {
		return err
	}
	var w world
	defer w.close()
	env := []string{"TS_DEBUG_ALWAYS_USE_DERP=true"}
	spec := hderpSpec{bin: c.hderpBin, work: c.work, certdir: certdir}
	var release func()
	var err error
	if spec.port, release, err = holdPort(); err != nil {
		return err
	}
	defer release()
	if c.plain {
		env = append(env, "TS_DEBUG_USE_DERP_HTTP=1")
	} else {
		var caFile string
		if caFile, spec.pool, err = writeCA(c.work, certdir); err != nil {
			return fmt.Errorf("test CA: %w", err)
		}
		env = append(env, "SSL_CERT_FILE="+caFile)
	}
	if w.hd, err = startHderp(spec); err != nil {
		return err
	}
	step("hderp-server listening: DERP 127.0.0.1:%d (%s), STUN :%d", w.hd.derpPort,
		map[bool]string{true: "TLS, test CA", false: "plain HTTP"}[w.hd.tls], w.hd.stunPort)
	if w.control, err = startControl(w.hd); err != nil {
		return err
	}
	step("testcontrol at %s; DERP map: region %d %q, the hderp node only", w.control.URL,
		regionID, regionCode)
	if w.a, err = startNode("a", c.nodeA, c.work, w.control.URL, env); err != nil {
		return err
	}
	if w.b, err = startNode("b", c.nodeB, c.work, w.control.URL, env); err != nil {
		return err
	}
	for i, n := range []*nodeProc{w.a, w.b} {
		if err := n.waitReady(); err != nil {
			return err
		}
		if want := []string{c.wantA, c.wantB}[i]; want != "" && n.Version != want {
			return fmt.Errorf("node %s is tailscale.com %s, want %s", n.name, n.Version, want)
		}
		if n.Relay != regionCode {
			return fmt.Errorf("%s's home DERP region is %q, want %q", n.name, n.Relay,
				regionCode)
		}
		step("node %s up: %s, %s, %s, home DERP %q", n.name, n.Version, n.IP, n.Key, n.Relay)
	}
	if err := checkPaths(&w, c.bytes); err != nil {
		return err
	}
	if err := checkStopped(&w); err != nil {
		return err
	}
	if w.hd, err = startHderp(spec); err != nil {
		return fmt.Errorf("restarting hderp-server: %w", err)
	}
	step("hderp-server restarted on the same port and key")
	return checkRestarted(&w)
}

// workMark marks a directory as tspair's, so a later run may empty it.
const workMark = ".tspair-work"

// prepareWork makes dir empty but for the mark: a new directory, or one of an earlier run
// (marked); anything else is refused rather than deleted.
func prepareWork(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return err
	case len(ents) == 0:
	default:
		if _, err := os.Stat(filepath.Join(dir, workMark)); err != nil {
			return fmt.Errorf("--work %s is not empty and is not an earlier run's (no %s): "+
				"give a new or empty directory", dir, workMark)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, workMark), nil, 0o600)
}

// startControl serves testcontrol on loopback with a DERP map of hderp alone.
func startControl(hd *hderp) (*httptest.Server, error) {
	node := &tailcfg.DERPNode{
		Name:     "900a",
		RegionID: regionID,
		HostName: derpHost,
		IPv4:     "127.0.0.1",
		IPv6:     "none",
		DERPPort: hd.derpPort,
		STUNPort: hd.stunPort,
	}
	ctl := &testcontrol.Server{
		DERPMap: &tailcfg.DERPMap{
			OmitDefaultRegions: true,
			Regions: map[int]*tailcfg.DERPRegion{regionID: {
				RegionID: regionID, RegionCode: regionCode, RegionName: "hderp on loopback",
				Nodes: []*tailcfg.DERPNode{node},
			}},
		},
		Logf: func(format string, a ...any) {}, // the nodes' logs say what matters
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(ctl)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Config.ErrorLog = nil
	srv.Start()
	ctl.HTTPTestServer = srv
	// testcontrol answers an unknown path by panicking; make sure it is the server we think.
	resp, err := http.Get(srv.URL + "/key?v=100")
	if err != nil {
		srv.Close()
		return nil, fmt.Errorf("testcontrol /key: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		srv.Close()
		return nil, errors.New("testcontrol /key: HTTP " + resp.Status)
	}
	return srv, nil
}

var started = time.Now()

// step reports a check that held, with the seconds since the start.
func step(format string, a ...any) {
	fmt.Printf("ok [%5.1fs]: "+format+"\n", append([]any{time.Since(started).Seconds()}, a...)...)
}

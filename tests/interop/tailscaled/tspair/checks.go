package main

import (
	"errors"
	"fmt"
	"time"
)

// Bounds for hangs (never pass/fail on speed): how long a node may take to see its peer or get
// a first answer while its DERP connection settles.
const (
	settleBound = 2 * time.Minute
	attemptMs   = 3_000  // one attempt of a ping that is retried until settleBound
	windowMs    = 10_000 // the window in which nothing may pass with hderp stopped
)

type pingResult struct {
	OK     bool   `json:"ok"`
	Err    string `json:"err"`
	Result struct {
		NodeIP         string  `json:"NodeIP"`
		Err            string  `json:"Err"`
		LatencySeconds float64 `json:"LatencySeconds"`
		Endpoint       string  `json:"Endpoint"`
		PeerRelay      string  `json:"PeerRelay"`
		DERPRegionID   int     `json:"DERPRegionID"`
		DERPRegionCode string  `json:"DERPRegionCode"`
	} `json:"result"`
}

type peerStatus struct {
	Key     string   `json:"key"`
	IPs     []string `json:"ips"`
	CurAddr string   `json:"cur_addr"`
	Relay   string   `json:"relay"`
	RxBytes int64    `json:"rx_bytes"`
	TxBytes int64    `json:"tx_bytes"`
}

type statusResult struct {
	Backend string       `json:"backend"`
	Relay   string       `json:"relay"`
	Peers   []peerStatus `json:"peers"`
}

type sendResult struct {
	Sent       int64   `json:"sent"`
	SHA256     string  `json:"sha256"`
	PeerBytes  int64   `json:"peer_bytes"`
	PeerSHA256 string  `json:"peer_sha256"`
	Seconds    float64 `json:"seconds"`
}

type sinkResult struct {
	Bytes     int64 `json:"bytes"`
	Conns     int64 `json:"conns"`
	Completed int64 `json:"completed"`
}

// peerOf is n's view of other: found, and on a DERP path only (no direct address).
func peerOf(n, other *nodeProc) (*peerStatus, error) {
	var st statusResult
	if err := n.call(map[string]any{"op": "status"}, &st); err != nil {
		return nil, err
	}
	for i := range st.Peers {
		if st.Peers[i].Key == other.Key {
			return &st.Peers[i], nil
		}
	}
	return nil, nil
}

// waitPeer polls n's status until it lists other (bounded).
func waitPeer(n, other *nodeProc) error {
	deadline := time.Now().Add(settleBound)
	for {
		p, err := peerOf(n, other)
		if err != nil {
			return err
		}
		if p != nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s never listed %s (%s) as a peer in %v", n.name, other.name,
				other.Key, settleBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ping pings other from n until it is answered (bounded), and returns the answer.
func ping(n, other *nodeProc, typ string) (*pingResult, error) {
	deadline := time.Now().Add(settleBound)
	for {
		var r pingResult
		err := n.call(map[string]any{"op": "ping", "ip": other.IP, "type": typ,
			"timeout_ms": attemptMs}, &r)
		var ne *nodeError
		if err == nil {
			return &r, nil
		}
		if !errors.As(err, &ne) {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s ping %s -> %s never answered in %v: %v", typ, n.name,
				other.name, settleBound, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitHomes polls hderp's /debug/varz until both nodes are connected to it as their home
// (tailscaled's NotePreferred understood): derp_current_home_connections = 2 (bounded).
func waitHomes(hd *hderp) error {
	const series = "derp_current_home_connections"
	deadline := time.Now().Add(settleBound)
	for {
		v, err := hd.varz()
		if err != nil {
			return fmt.Errorf("hderp /debug/varz: %w", err)
		}
		if v[series] == 2 {
			step("hderp has both nodes as home connections (%s = 2, %s = %v)", series,
				"derp_current_connections", v["derp_current_connections"])
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s = %v after %v, want 2 (one per node)", series, v[series],
				settleBound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkPaths: pings and transfers both ways, over hderp and nothing else.
func checkPaths(w *world, size int64) error {
	pairs := [][2]*nodeProc{{w.a, w.b}, {w.b, w.a}}
	for _, p := range pairs {
		if err := waitPeer(p[0], p[1]); err != nil {
			return err
		}
	}
	if err := waitHomes(w.hd); err != nil {
		return err
	}
	for _, p := range pairs {
		r, err := ping(p[0], p[1], "disco")
		if err != nil {
			return err
		}
		res := r.Result
		if res.DERPRegionID != regionID || res.Endpoint != "" || res.PeerRelay != "" {
			return fmt.Errorf("disco ping %s -> %s: pong via DERP region %d, endpoint %q, "+
				"peer relay %q; want region %d only", p[0].name, p[1].name, res.DERPRegionID,
				res.Endpoint, res.PeerRelay, regionID)
		}
		step("disco ping %s -> %s: pong via DERP region %d (%s), no direct endpoint, %.1f ms",
			p[0].name, p[1].name, res.DERPRegionID, res.DERPRegionCode,
			res.LatencySeconds*1e3)
		if r, err = ping(p[0], p[1], "TSMP"); err != nil {
			return err
		}
		step("TSMP ping %s -> %s: answered by %s, %.1f ms", p[0].name, p[1].name,
			r.Result.NodeIP, r.Result.LatencySeconds*1e3)
	}
	if err := checkDERPOnly(pairs); err != nil {
		return err
	}
	v0, err := w.hd.varz()
	if err != nil {
		return fmt.Errorf("hderp /debug/varz: %w", err)
	}
	disco := v0[`derp_packets_received_kind{kind="disco"}`]
	if disco < 4 {
		return fmt.Errorf("hderp counted %v disco packets after 4 disco pings", disco)
	}
	step("hderp relayed the pings: derp_packets_received_kind{kind=\"disco\"} = %v", disco)
	for i, p := range pairs {
		if err := transfer(w, p[0], p[1], size, uint64(i+1)); err != nil {
			return err
		}
	}
	return checkDERPOnly(pairs)
}

// checkDERPOnly: each node's view of its peer has no direct address and hderp's region.
func checkDERPOnly(pairs [][2]*nodeProc) error {
	for _, p := range pairs {
		ps, err := peerOf(p[0], p[1])
		if err != nil {
			return err
		}
		if ps == nil {
			return fmt.Errorf("%s no longer lists %s", p[0].name, p[1].name)
		}
		if ps.CurAddr != "" || ps.Relay != regionCode {
			return fmt.Errorf("%s sees %s at direct address %q, DERP region %q; want none and %q",
				p[0].name, p[1].name, ps.CurAddr, ps.Relay, regionCode)
		}
	}
	step("both nodes see each other on DERP region %q with no direct address", regionCode)
	return nil
}

// transfer sends size bytes from n to other's sink and checks the sums and hderp's counters.
func transfer(w *world, n, other *nodeProc, size int64, seed uint64) error {
	v0, err := w.hd.varz()
	if err != nil {
		return fmt.Errorf("hderp /debug/varz: %w", err)
	}
	var r sendResult
	err = n.call(map[string]any{"op": "send", "addr": fmt.Sprintf("%s:5001", other.IP),
		"bytes": size, "seed": seed, "stall_ms": 60_000}, &r)
	if err != nil {
		return fmt.Errorf("transfer %s -> %s: %w", n.name, other.name, err)
	}
	if r.Sent != size || r.PeerBytes != size || r.SHA256 == "" || r.SHA256 != r.PeerSHA256 {
		return fmt.Errorf("transfer %s -> %s: sent %d bytes sha256 %s, %s read %d sha256 %s",
			n.name, other.name, r.Sent, r.SHA256, other.name, r.PeerBytes, r.PeerSHA256)
	}
	v1, err := w.hd.varz()
	if err != nil {
		return fmt.Errorf("hderp /debug/varz: %w", err)
	}
	rx := v1["derp_bytes_received"] - v0["derp_bytes_received"]
	tx := v1["derp_bytes_sent"] - v0["derp_bytes_sent"]
	if rx < float64(size) || tx < float64(size) {
		return fmt.Errorf("transfer %s -> %s of %d bytes: hderp received %.0f and sent %.0f "+
			"bytes meanwhile; the data went another way", n.name, other.name, size, rx, tx)
	}
	step("%d bytes %s -> %s, sha256 %s at both ends, %.1f s (%.1f Mbit/s); hderp relayed "+
		"%.0f bytes in, %.0f out", size, n.name, other.name, r.SHA256[:16], r.Seconds,
		float64(size)*8/r.Seconds/1e6, rx, tx)
	return nil
}

// checkStopped stops hderp and checks that nothing passes between the nodes any more.
func checkStopped(w *world) error {
	pairs := [][2]*nodeProc{{w.a, w.b}, {w.b, w.a}}
	before := map[string]sinkResult{}
	for _, n := range []*nodeProc{w.a, w.b} {
		var s sinkResult
		if err := n.call(map[string]any{"op": "received"}, &s); err != nil {
			return err
		}
		before[n.name] = s
	}
	if err := w.hd.stop(); err != nil {
		return err
	}
	if _, err := w.hd.varz(); err == nil {
		return errors.New("hderp-server still answers /debug/varz after it exited")
	}
	step("hderp-server stopped (SIGTERM, exited)")
	// Both nodes probe at once: a disco ping, a TSMP ping and a 1 MiB send each, in one window.
	for _, p := range pairs {
		err := p[0].request(map[string]any{"op": "probe", "ip": p[1].IP,
			"addr": fmt.Sprintf("%s:5001", p[1].IP), "timeout_ms": windowMs})
		if err != nil {
			return err
		}
	}
	for _, p := range pairs {
		var r struct {
			Disco, TSMP, Send struct {
				OK  bool   `json:"ok"`
				Err string `json:"err"`
			}
		}
		if err := p[0].answer(&r); err != nil {
			return err
		}
		for _, x := range []struct {
			what string
			ok   bool
			err  string
		}{{"disco ping", r.Disco.OK, r.Disco.Err}, {"TSMP ping", r.TSMP.OK, r.TSMP.Err},
			{"1 MiB transfer", r.Send.OK, r.Send.Err}} {
			if x.ok || x.err == "" {
				return fmt.Errorf("%s %s -> %s passed with hderp stopped", x.what, p[0].name,
					p[1].name)
			}
			step("%s %s -> %s failed with hderp stopped (%s)", x.what, p[0].name, p[1].name,
				x.err)
		}
	}
	for _, n := range []*nodeProc{w.a, w.b} {
		var s sinkResult
		if err := n.call(map[string]any{"op": "received"}, &s); err != nil {
			return err
		}
		if s != before[n.name] {
			return fmt.Errorf("%s's sink went from %+v to %+v with hderp stopped", n.name,
				before[n.name], s)
		}
	}
	step("no byte reached either sink with hderp stopped")
	return nil
}

// checkRestarted: after hderp-server's restart the nodes reconnect by themselves, and pings and
// 1 MiB each way pass again, through hderp alone.
func checkRestarted(w *world) error {
	pairs := [][2]*nodeProc{{w.a, w.b}, {w.b, w.a}}
	if err := waitHomes(w.hd); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	for _, p := range pairs {
		r, err := ping(p[0], p[1], "disco")
		if err != nil {
			return fmt.Errorf("after the restart: %w", err)
		}
		if r.Result.DERPRegionID != regionID || r.Result.Endpoint != "" {
			return fmt.Errorf("after the restart, disco ping %s -> %s: region %d, endpoint %q",
				p[0].name, p[1].name, r.Result.DERPRegionID, r.Result.Endpoint)
		}
		step("after the restart, disco ping %s -> %s: pong via DERP region %d", p[0].name,
			p[1].name, r.Result.DERPRegionID)
	}
	for i, p := range pairs {
		if err := transfer(w, p[0], p[1], 1<<20, uint64(10+i)); err != nil {
			return fmt.Errorf("after the restart: %w", err)
		}
	}
	return checkDERPOnly(pairs)
}

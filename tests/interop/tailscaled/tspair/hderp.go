package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// derpHost is the DERP node's name in the DERP map, the server's -hostname and its
// certificate's name (the nodes dial 127.0.0.1 and verify this name).
const derpHost = "derp.hderp.test"

// hderp is one hderp-server process on loopback.
type hderp struct {
	cmd      *exec.Cmd
	exited   chan error
	log      string
	derpPort int
	stunPort int
	tls      bool
	varzc    *http.Client
}

// writeCA makes a test CA and a certificate for derpHost signed by it: ca.pem (what the nodes
// trust through SSL_CERT_FILE) and certdir/derpHost.{crt,key} (hderp-server's -certmode manual).
func writeCA(dir, certdir string) (caFile string, pool *x509.CertPool, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "hderp interop test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(48 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", nil, err
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: derpHost},
		DNSNames:     []string{derpHost},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(48 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return "", nil, err
	}
	leafKeyDER, err := x509.MarshalECPrivateKey(leafKey)
	if err != nil {
		return "", nil, err
	}
	caFile = filepath.Join(dir, "ca.pem")
	files := []struct {
		path, typ string
		der       []byte
	}{
		{caFile, "CERTIFICATE", caDER},
		{filepath.Join(certdir, derpHost+".crt"), "CERTIFICATE", leafDER},
		{filepath.Join(certdir, derpHost+".key"), "EC PRIVATE KEY", leafKeyDER},
	}
	for _, f := range files {
		b := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(f.path, b, 0o600); err != nil {
			return "", nil, err
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return caFile, pool, nil
}

// hderpSpec is how hderp-server is started, the same at a restart.
type hderpSpec struct {
	bin, work, certdir string
	pool               *x509.CertPool // the test CA: TLS; nil: plain HTTP
	port               int            // held by holdPort, so a restart gets it back
}

// holdPort binds (without listening) a TCP socket on 127.0.0.1 port 0 with SO_REUSEADDR and
// keeps it: the kernel gives that port to no one else, while hderp-server, which sets
// SO_REUSEADDR on its listener, can bind it beside the idle socket, again after a restart.
func holdPort() (port int, release func(), err error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, nil, err
	}
	release = func() { syscall.Close(fd) }
	if err = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err == nil {
		err = syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	}
	var sa syscall.Sockaddr
	if err == nil {
		sa, err = syscall.Getsockname(fd)
	}
	if err != nil {
		release()
		return 0, nil, fmt.Errorf("holding a port: %w", err)
	}
	return sa.(*syscall.SockaddrInet4).Port, release, nil
}

// startHderp starts hderp-server on 127.0.0.1:spec.port (STUN on a port of the kernel's
// choice, 2 shards), TLS with certdir's certificate when spec.pool is not nil, and waits for its
// --port-file. The log is appended to, so a restart keeps the first run's.
func startHderp(spec hderpSpec) (*hderp, error) {
	portFile := filepath.Join(spec.work, "hderp.ports")
	os.Remove(portFile)
	args := []string{"-a", "127.0.0.1:" + strconv.Itoa(spec.port),
		"-c", filepath.Join(spec.work, "derper.key"),
		"-stun-port", "0", "--shards", "2", "--port-file", portFile}
	if spec.pool != nil {
		args = append(args, "-certmode", "manual", "-certdir", spec.certdir,
			"-hostname", derpHost, "-http-port", "-1")
	}
	h := &hderp{log: filepath.Join(spec.work, "hderp.log"), exited: make(chan error, 1),
		tls: spec.pool != nil}
	logf, err := os.OpenFile(h.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	h.cmd = exec.Command(spec.bin, args...)
	h.cmd.Stdout, h.cmd.Stderr = logf, logf
	if err := h.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.bin, err)
	}
	go func() { h.exited <- h.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second) // a bound for a hang only
	for {
		ports, err := readPorts(portFile)
		if err == nil && ports["derp"] != 0 && ports["stun"] != 0 {
			h.derpPort, h.stunPort = ports["derp"], ports["stun"]
			break
		}
		select {
		case err := <-h.exited:
			return nil, fmt.Errorf("hderp-server exited before it listened (%v); log %s",
				err, h.log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			h.kill()
			return nil, fmt.Errorf("hderp-server wrote no port file in 30s; log %s", h.log)
		}
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn,
		error) {
		var d net.Dialer
		return d.DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(h.derpPort))
	}}
	if spec.pool != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: spec.pool, ServerName: derpHost}
	}
	h.varzc = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	return h, nil
}

// readPorts reads --port-file's "NAME ADDRESS" lines into NAME -> port.
func readPorts(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ports := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, addr, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, fmt.Errorf("port file line %q: %v", sc.Text(), err)
		}
		if ports[name], err = strconv.Atoi(port); err != nil {
			return nil, err
		}
	}
	return ports, sc.Err()
}

func (h *hderp) baseURL() string {
	if h.tls {
		return "https://" + derpHost
	}
	return "http://" + derpHost
}

// varz reads /debug/varz into series name (labels included) -> value.
func (h *hderp) varz() (map[string]float64, error) {
	resp, err := h.varzc.Get(h.baseURL() + "/debug/varz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("/debug/varz: HTTP %d", resp.StatusCode)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	return m, sc.Err()
}

// stop sends SIGTERM and waits for the exit (bounded; SIGKILL after it and an error).
func (h *hderp) stop() error {
	if err := h.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case err := <-h.exited:
		h.exited <- err
		return nil
	case <-time.After(30 * time.Second):
		h.kill()
		return errors.New("hderp-server did not exit within 30s of SIGTERM")
	}
}

func (h *hderp) kill() {
	h.cmd.Process.Kill()
}

// Command derpclient drives running DERP servers (hderp-server, and derper in a mixed region)
// with Tailscale's own DERP client, tailscale.com/derp/derphttp and tailscale.com/derp at the
// version go.mod pins. It prints one line per check, "ok NAME" or "FAIL NAME: why", and exits 1
// if any check failed (2 for bad flags). tests/interop/interop.py starts the servers and runs it.
//
//	derpclient -url http://127.0.0.1:PORT/derp -mesh-key-file F -varz URL           (plain)
//	derpclient -url https://localhost:PORT/derp -ca CA.pem ...                        (TLS)
//	derpclient -ws ...                    (the client's WebSocket carrier, as browsers use)
//	derpclient -mixed -url URL_A -url2 URL_B -mesh-key-file F   (two meshed nodes of a region)
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"tailscale.com/envknob"
	"tailscale.com/types/key"
)

// waitS bounds every wait for a message or a state change: a bound for a hang (a check that
// runs into it fails), never a performance figure.
const waitS = 20 * time.Second

type env struct {
	url, url2  string // DERP URLs (url2: the other node of a mixed region)
	host, port string // url's host name and port
	tls, ws    bool
	meshKey    key.DERPMesh
	varzURL    string
	caFile     string
	roots      *x509.CertPool // the test CA (TLS mode), for the checks' own dials
	logf       func(string, ...any)
}

type check struct {
	name string
	fn   func(*env) error
}

func main() {
	var e env
	var meshFile, only, skip string
	var mixed, verbose bool
	flag.StringVar(&e.url, "url", "", "DERP URL of the server under test (http:// or https://)")
	flag.StringVar(&e.url2, "url2", "", "-mixed: DERP URL of the region's other node")
	flag.StringVar(&meshFile, "mesh-key-file", "", "the region's mesh key (64 hex digits)")
	flag.StringVar(&e.varzURL, "varz", "", "the server's /debug/varz URL (note-preferred)")
	flag.StringVar(&e.caFile, "ca", "", "TLS: the CA that signed the servers' certificates "+
		"(with -ws, SSL_CERT_FILE must name the same file; without, be unset)")
	flag.BoolVar(&e.ws, "ws", false, "connect over WebSocket (TS_DEBUG_DERP_WS_CLIENT=1)")
	flag.BoolVar(&mixed, "mixed", false, "run the mixed-region checks (-url and -url2)")
	flag.StringVar(&only, "run", "", "only the checks whose name matches this regexp")
	flag.StringVar(&skip, "skip", "", "not the checks whose name matches this regexp")
	flag.BoolVar(&verbose, "v", false, "the client's own log lines on stderr")
	flag.Parse()
	if err := setup(&e, meshFile, verbose); err != nil {
		fmt.Fprintln(os.Stderr, "derpclient:", err)
		os.Exit(2)
	}
	checks := singleChecks(&e)
	if mixed {
		if e.url2 == "" {
			fmt.Fprintln(os.Stderr, "derpclient: -mixed needs -url2")
			os.Exit(2)
		}
		checks = mixedChecks()
	}
	re, err := regexp.Compile(only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "derpclient: -run:", err)
		os.Exit(2)
	}
	var skipRe *regexp.Regexp
	if skip != "" {
		if skipRe, err = regexp.Compile(skip); err != nil {
			fmt.Fprintln(os.Stderr, "derpclient: -skip:", err)
			os.Exit(2)
		}
	}
	failed, ran := 0, 0
	for _, c := range checks {
		if !re.MatchString(c.name) || (skipRe != nil && skipRe.MatchString(c.name)) {
			fmt.Printf("--   %s: not selected\n", c.name)
			continue
		}
		ran++
		start := time.Now()
		if err := c.fn(&e); err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", c.name, err)
		} else {
			fmt.Printf("ok   %s (%.2fs)\n", c.name, time.Since(start).Seconds())
		}
	}
	fmt.Printf("derpclient: %d checks, %d failed\n", ran, failed)
	if failed > 0 || ran == 0 {
		os.Exit(1)
	}
}

func setup(e *env, meshFile string, verbose bool) error {
	if e.url == "" {
		return fmt.Errorf("-url (and with -mixed, -url2) needed")
	}
	u, err := url.Parse(e.url)
	if err != nil {
		return fmt.Errorf("-url: %v", err)
	}
	e.host, e.port, e.tls = u.Hostname(), u.Port(), u.Scheme == "https"
	if meshFile == "" {
		return fmt.Errorf("-mesh-key-file needed")
	}
	b, err := os.ReadFile(meshFile)
	if err != nil {
		return err
	}
	if e.meshKey, err = key.ParseDERPMesh(strings.TrimSpace(string(b))); err != nil {
		return fmt.Errorf("%s: %v", meshFile, err)
	}
	if e.tls {
		// derphttp's own dials take the CA as TLSConfig.RootCAs; its WebSocket dial (Go's
		// default TLS verification) takes the system pool only.
		ssl := os.Getenv("SSL_CERT_FILE")
		if e.caFile == "" || (e.ws && ssl != e.caFile) || (!e.ws && ssl != "") {
			return fmt.Errorf("https needs -ca CA.pem, and SSL_CERT_FILE=CA.pem with -ws " +
				"(without -ws unset, so that the CA is needed)")
		}
		pem, err := os.ReadFile(e.caFile)
		if err != nil {
			return err
		}
		e.roots = x509.NewCertPool()
		if !e.roots.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: no certificate", e.caFile)
		}
	}
	if e.ws { // every client of this process uses the WebSocket carrier (subprotocol "derp")
		envknob.Setenv("TS_DEBUG_DERP_WS_CLIENT", "1")
	}
	if !e.tls { // region clients (DERP map dials) speak plain HTTP, as tailscaled with it set
		envknob.Setenv("TS_DEBUG_USE_DERP_HTTP", "1")
	}
	e.logf = func(string, ...any) {}
	if verbose {
		e.logf = log.Printf
	} else {
		log.SetOutput(discard{})
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// httpClient fetches /debug/varz (TLS: verified against the test CA).
func (e *env) httpClient() *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: e.roots}}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

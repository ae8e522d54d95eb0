package tls

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

func startEPP(t *testing.T, extra ...string) (grpcAddr string) {
	t.Helper()
	g, h, m := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
	args := append([]string{"--endpoints-file", filepath.Join(repoRoot, "config/endpoints/sample.yaml"),
		"--config-file", filepath.Join(repoRoot, "config/lab/epp/pd.yaml"),
		"--grpc-port", fmt.Sprint(g), "--grpc-health-port", fmt.Sprint(h), "--metrics-port", fmt.Sprint(m)}, extra...)
	run(t, "epp", args...)
	return fmt.Sprintf("127.0.0.1:%d", g)
}

// The ext_proc port serves TLS with no TLS flag given, and a plaintext HTTP/2 client gets
// no HTTP/2 answer.
func TestEPPExtProcTLSByDefault(t *testing.T) {
	addr := startEPP(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if der := peerCert(ctx, t, addr, "h2"); len(der) == 0 {
		t.Fatal("no certificate")
	}
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, _ = io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	b := make([]byte, 16)
	n, _ := io.ReadAtLeast(c, b, 1)
	// An HTTP/2 server answers with a SETTINGS frame (length 0x00…, type 0x04); a TLS server
	// answers a non-handshake record with an alert (0x15) or closes.
	if n >= 4 && b[0] == 0 && b[3] == 4 {
		t.Fatalf("the ext_proc port answered plaintext HTTP/2: % x", b[:n])
	}
}

// With --cert-path and --enable-cert-reload, new handshakes see a rotated certificate.
func TestEPPCertReload(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := pairIn(dir)
	first := writePair(t, certPath, keyPath, "epp-one")
	addr := startEPP(t, "--cert-path", dir, "--enable-cert-reload")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if got := peerCert(ctx, t, addr, "h2"); !bytes.Equal(got, first) {
		t.Fatal("the EPP does not serve the certificate from --cert-path")
	}
	second := writePair(t, certPath, keyPath, "epp-two-rotated")
	waitCert(ctx, t, addr, second)
}

func waitCert(ctx context.Context, t *testing.T, addr string, want []byte) {
	t.Helper()
	for !bytes.Equal(peerCert(ctx, t, addr), want) {
		select {
		case <-ctx.Done():
			t.Fatal("new handshakes still see the old certificate")
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func pool(t *testing.T, der []byte) *x509.CertPool {
	t.Helper()
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := x509.NewCertPool()
	p.AddCert(c)
	return p
}

const chat = `{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

func postTLS(t *testing.T, url string, roots *x509.CertPool, hdr map[string]string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}}}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chat))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The sidecar's listener serves TLS from files, verified by clients, and new handshakes see
// rotated files without a restart.
func TestSidecarListenerTLSAndReload(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := pairIn(dir)
	first := writePair(t, certPath, keyPath, "sidecar-one")
	dp, sp := testsupport.FreePort(t), testsupport.FreePort(t)
	run(t, "sim", "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--role", "decode", "--time-scale", "20")
	run(t, "sidecar", "--listen", fmt.Sprintf("127.0.0.1:%d", sp), "--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp),
		"--allowlist", "127.0.0.1:1", "--tls-cert-file", certPath, "--tls-key-file", keyPath)
	addr := fmt.Sprintf("127.0.0.1:%d", sp)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if got := peerCert(ctx, t, addr); !bytes.Equal(got, first) {
		t.Fatal("the sidecar does not serve --tls-cert-file")
	}
	waitSim(ctx, t, dp)
	if code, body := postTLS(t, "https://"+addr, pool(t, first), nil); code != http.StatusOK {
		t.Fatalf("over TLS: %d %s", code, body)
	}
	second := writePair(t, certPath, keyPath, "sidecar-two-rotated")
	waitCert(ctx, t, addr, second)
	if code, body := postTLS(t, "https://"+addr, pool(t, second), nil); code != http.StatusOK {
		t.Fatalf("after rotation: %d %s", code, body)
	}
}

func waitSim(ctx context.Context, t *testing.T, port int) {
	t.Helper()
	for {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/health", port))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal("simulator not healthy")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// The prefill leg speaks TLS when asked (--enable-tls prefiller) and verifies the prefill
// engine against --tls-ca-file; an unverifiable engine fails the leg instead of being called
// in the clear.
func TestSidecarPrefillLegTLS(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := pairIn(dir)
	der := writePair(t, certPath, keyPath, "prefill-engine")
	var tlsPosts atomic.Int64
	cert, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && r.Method == http.MethodPost {
			tlsPosts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"p","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""},"finish_reason":"length"}],"kv_transfer_params":{"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"127.0.0.1","remote_port":1,"do_remote_decode":false,"do_remote_prefill":true}}`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_ = der

	dp, sp := testsupport.FreePort(t), testsupport.FreePort(t)
	run(t, "sim", "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--role", "decode", "--time-scale", "20")
	run(t, "sidecar", "--listen", fmt.Sprintf("127.0.0.1:%d", sp), "--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp),
		"--allowlist", ln.Addr().String(), "--enable-tls", "prefiller", "--tls-ca-file", certPath)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitSim(ctx, t, dp)
	url := fmt.Sprintf("http://127.0.0.1:%d", sp)
	for {
		resp, err := http.Get(url + "/sidecar/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("sidecar not up")
		case <-time.After(100 * time.Millisecond):
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(chat))
	req.Header.Set("x-prefiller-host-port", ln.Addr().String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tlsPosts.Load() != 1 {
		t.Fatalf("the prefill leg did not arrive over verified TLS (%d TLS posts, status %d)", tlsPosts.Load(), resp.StatusCode)
	}
}

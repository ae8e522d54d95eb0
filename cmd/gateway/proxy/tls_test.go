package proxy

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/pdgate/pdgate/cmd/internal/selfsigned"
)

// selfSigned returns the certificate the EPP serves without one of its own, for 127.0.0.1, and
// its PEM (a client that trusts it verifies it as its own CA).
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	cert, err := selfsigned.Certificate("epp", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
}

// The EPP serves TLS by default with a self-signed certificate: the gateway must reach it
// with --epp-insecure-skip-verify or a CA file, and fail closed without either.
func TestGatewayTLSToEPP(t *testing.T) {
	cert, caPEM := selfSigned(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	up := startUpstream(t, "via tls", nil)
	extprocv3.RegisterExternalProcessorServer(s, &fakeEPP{decide: func(map[string]string, []byte) decision { return decision{dest: up} }})
	go func() { _ = s.Serve(ln) }()
	defer s.Stop()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		mutate     func(*Options)
		wantStatus int
		wantBody   string
	}{
		{name: "insecure skip verify", mutate: func(o *Options) { o.EPPInsecureSkipVerify = true }, wantStatus: 200, wantBody: "via tls"},
		{name: "CA file", mutate: func(o *Options) { o.EPPCAFile = caFile }, wantStatus: 200, wantBody: "via tls"},
		{name: "unverified certificate fails closed", mutate: func(*Options) {}, wantStatus: 503, wantBody: "endpoint_picker_unavailable"},
		{name: "plaintext to a TLS EPP fails closed", mutate: func(o *Options) { o.EPPTLS = false }, wantStatus: 503, wantBody: "endpoint_picker_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions()
			o.EPPAddr = ln.Addr().String()
			o.MessageTimeout = 2 * time.Second
			tt.mutate(&o)
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			conn, err := DialEPP(o)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			gw := httptest.NewServer(New(o, extprocv3.NewExternalProcessorClient(conn), nil))
			defer gw.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/v1/completions", strings.NewReader(`{"model":"m"}`))
			resp, err := http.DefaultClient.Do(req)
			wantAnswer(t, resp, err, tt.wantStatus, tt.wantBody)
		})
	}
}

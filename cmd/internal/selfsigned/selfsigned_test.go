package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestCertificate(t *testing.T) {
	tests := []struct {
		name  string
		cn    string
		hosts []string
	}{
		{"the EPP's ext_proc listener", "pdgate-epp", nil},
		{"the sidecar, for localhost", "pdgate-sidecar", []string{"localhost"}},
		{"an address, as tests dial a loopback listener", "epp", []string{"127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cert, err := Certificate(tt.cn, tt.hosts...)
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := x509.ParseCertificate(cert.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if leaf.Subject.CommonName != tt.cn || len(leaf.DNSNames)+len(leaf.IPAddresses) != len(tt.hosts) {
				t.Fatalf("subject %q names %v %v, want %q %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses, tt.cn, tt.hosts)
			}
			if d := time.Until(leaf.NotAfter); d < Validity-time.Hour || d > Validity {
				t.Fatalf("valid for %s more, want about %s", d, Validity)
			}
			if time.Now().Before(leaf.NotBefore) {
				t.Fatal("not valid yet")
			}
			// A TLS server presents it and a client that pins it connects.
			s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
			s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
			s.StartTLS()
			defer s.Close()
			pool := x509.NewCertPool()
			pool.AddCert(leaf)
			// The client checks the chain against the pinned certificate (and, where the
			// certificate names hosts, the host: the sidecar's is valid for localhost, and an
			// address is checked against the IP SANs).
			verify := func(cs tls.ConnectionState) error {
				opts := x509.VerifyOptions{Roots: pool}
				if len(tt.hosts) > 0 {
					opts.DNSName = tt.hosts[0]
				}
				_, err := cs.PeerCertificates[0].Verify(opts)
				return err
			}
			c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyConnection: verify}}}
			resp, err := c.Get(s.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 204 {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

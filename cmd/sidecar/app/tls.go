package app

import (
	"crypto/tls"
	"github.com/pdgate/pdgate/cmd/internal/selfsigned"
)

// serverTLS returns the listener's TLS config, nil for plain HTTP.
func (o *Options) serverTLS() (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	switch {
	case o.TLSCertFile != "":
		r, err := newCertReloader(o.TLSCertFile, o.TLSKeyFile)
		if err != nil {
			return nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{"h2", "http/1.1"}}, nil
	case o.TLSSelfSigned:
		cert, err = SelfSigned()
		if err != nil {
			return nil, err
		}
	default:
		return nil, nil
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}, nil
}

// SelfSigned generates the sidecar's self-signed certificate (ECDSA P-256, one year, for
// localhost).
func SelfSigned() (tls.Certificate, error) {
	return selfsigned.Certificate("pdgate-sidecar", "localhost")
}

package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// Config builds the tls.Config for redis.tls: nil when the file has no
// redis.tls block. Files are read now (a reload or restart picks up
// rotated certificates).
func (t *RedisTLS) Config() (*tls.Config, error) {
	if !t.Enabled {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pool, err := loadCAPool(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.ca_file: %w", err)
		}
		c.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		kp, err := loadKeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert_file/key_file: %w", err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c, nil
}

// maxPEMBytes bounds a TLS file read for redis.tls (a large CA bundle is
// a few hundred KB).
const maxPEMBytes = 16 << 20

func loadCAPool(path string) (*x509.CertPool, error) {
	pem, err := ReadFileAtMost(path, maxPEMBytes)
	if err != nil {
		return nil, withPath(path, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}

func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	if certFile == "" || keyFile == "" {
		return tls.Certificate{}, errors.New("cert_file and key_file go together")
	}
	certPEM, err := ReadFileAtMost(certFile, maxPEMBytes)
	if err != nil {
		return tls.Certificate{}, withPath(certFile, err)
	}
	keyPEM, err := ReadFileAtMost(keyFile, maxPEMBytes)
	if err != nil {
		return tls.Certificate{}, withPath(keyFile, err)
	}
	kp, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%s / %s: %w", certFile, keyFile, err)
	}
	return kp, nil
}

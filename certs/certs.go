// Package certs reads the CA bundles that the agent's TLS clients trust
// (probe checks, the RPC check's broker, the log sink).
package certs

import (
	"crypto/x509"
	"fmt"
	"os"
)

// Pool reads a PEM bundle into a pool; a file with no certificate in it is
// an error, not an empty pool that would trust nothing and fail later.
func Pool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

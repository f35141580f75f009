package rabbitmq

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/kolla-agent/kolla-agent/internal/pki"
)

// writeCerts writes ca.pem, and server.pem with server.key: a certificate
// for ServerName only, signed by that CA.
func writeCerts(dir string) error {
	return pki.WritePrivateCA(dir, "internal/rabbitmq test CA", ServerName)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

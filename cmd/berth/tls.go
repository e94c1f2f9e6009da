package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// certReloader serves the certificate of --tls-cert-file and
// --tls-key-file, and reads the pair again when either file changes
// (cert-manager or a mounted Secret rotating it), checked by stat at each
// handshake: a new certificate is served without a restart. A pair that
// does not load (a half-written rotation) keeps the last good one in use
// until it does.
type certReloader struct {
	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	seen [2]fileStamp // of certFile and keyFile when cert was loaded
}

// fileStamp is what a rotation changes: a mounted Secret swaps a symlink
// (a new inode, new mtime), an editor rewrites in place (mtime, size).
type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func newCertReloader(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	return r, nil
}

func stamp(file string) (fileStamp, error) {
	fi, err := os.Stat(file)
	if err != nil {
		return fileStamp{}, err
	}
	s := fileStamp{mod: fi.ModTime(), size: fi.Size()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = uint64(st.Ino)
	}
	return s, nil
}

// load reads the pair when either file changed since the last load.
func (r *certReloader) load() (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var now [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		s, err := stamp(f)
		if err != nil {
			if r.cert != nil {
				return r.cert, nil // mid-rotation; keep serving the last pair
			}
			return nil, fmt.Errorf("berth: --tls-cert-file/--tls-key-file: %w", err)
		}
		now[i] = s
	}
	if r.cert != nil && now == r.seen {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil
		}
		return nil, fmt.Errorf("berth: load the TLS certificate %s and key %s: %w; give a PEM certificate and its PEM private key", r.certFile, r.keyFile, err)
	}
	r.cert, r.seen = &cert, now
	return r.cert, nil
}

// GetCertificate is tls.Config.GetCertificate.
func (r *certReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.load()
}

// tlsConfig is the server's TLS configuration with r's certificate.
func (r *certReloader) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
		// HTTP/1.1 only: the server's connection accounting (--max-conns,
		// the spare probe connections) counts one request at a time.
		NextProtos: []string{"http/1.1"},
	}
}

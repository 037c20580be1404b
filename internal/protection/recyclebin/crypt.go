package recyclebin

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// Key seals what the recycle bin keeps of Secrets: AES-256-GCM, the
// object's UID as additional data (a sealed copy cannot be passed off as
// another object's), a random nonce per copy. The key is 32 random bytes
// in a file the operator provides (the chart makes it a Secret of its
// own, mounted read-only into the manager); its ID, the first bytes of its
// SHA-256, is stored with each copy so that a rotated key names the one a
// copy needs. The key never leaves the manager's memory.
type Key struct {
	aead cipher.AEAD
	id   string
}

// KeySize is the size of a key file.
const KeySize = 32

// NewKey makes a key from 32 bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("a recycle bin key is %d bytes, not %d (make one: head -c 32 /dev/urandom > key)", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	return &Key{aead: aead, id: hex.EncodeToString(sum[:4])}, nil
}

// LoadKey reads a key file.
func LoadKey(path string) (*Key, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("recycle bin key: %w", err)
	}
	return NewKey(raw)
}

// ID names the key without revealing it.
func (k *Key) ID() string { return k.id }

// Seal encrypts plain, bound to ad.
func (k *Key) Seal(plain, ad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return k.aead.Seal(nonce, nonce, plain, ad), nil
}

// ErrSealed says a sealed copy could not be opened: another key, or
// damaged, or not this object's.
var ErrSealed = errors.New("the sealed copy does not open with this key for this object")

// Open decrypts what Seal made for the same ad.
func (k *Key) Open(sealed, ad []byte) ([]byte, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return nil, ErrSealed
	}
	plain, err := k.aead.Open(nil, sealed[:n], sealed[n:], ad)
	if err != nil {
		return nil, ErrSealed
	}
	return plain, nil
}

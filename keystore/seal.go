package keystore

// Sealing protects secret records at rest in stores that write them somewhere
// other people can read: a database, a backup, a file. A store given a
// [Sealer] calls [SealValue] on every value it is about to write and
// [OpenValue] on every value it has read; both leave records of kinds that
// are not secret as they are, so cursors and User IDs stay readable to an
// operator.
//
// The AES-GCM sealer writes
//
//	magic "\x00pks1" | key ID (8 bytes) | nonce (12 bytes) | ciphertext | tag (16 bytes)
//
// The key ID is an HMAC-SHA-256 of a fixed label under the key, so it names a
// key without revealing it, and a sealer with several keys finds the one that
// opens a value without trying them all: the first key seals, every key opens,
// which is how keys are rotated. The associated data binds the magic, the key
// ID and every field of the record's Key, so a sealed value copied to another
// record (another User, issuer, kind or ID) fails to open instead of being
// read as that record.

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
)

// ErrCannotOpen is matched by the error a store returns when a sealed record
// can't be opened: the store's [Sealer] lacks the key that sealed it, the
// value was altered or moved from another record, or the store has no Sealer
// at all. The error names the record's Key, never its value.
var ErrCannotOpen = errors.New("keystore: cannot open sealed record")

// A Sealer encrypts and authenticates the values of secret records before a
// store writes them, and checks and decrypts them after it reads them. Seal
// and Open get the record's Key so that they can bind it to the value.
// Implementations are safe for concurrent use; [NewAESGCMSealer] returns one,
// and an application may supply its own (for instance one backed by a KMS).
//
// Open returns an error matching [ErrCannotOpen] when the value can't be
// opened, and never includes the value in an error.
type Sealer interface {
	// Seal returns plaintext encrypted and authenticated for the record
	// key.
	Seal(key Key, plaintext []byte) ([]byte, error)
	// Open returns the plaintext of a value Seal returned for the same
	// key, or an error matching ErrCannotOpen.
	Open(key Key, sealed []byte) ([]byte, error)
}

// SealValue returns what a store should write for key: value sealed by s
// when key's kind is [Kind.Secret] and s is not nil, otherwise value itself.
// Stores call it on every value they write.
func SealValue(s Sealer, key Key, value []byte) ([]byte, error) {
	if s == nil || !key.Kind.Secret() {
		return value, nil
	}
	return s.Seal(key, value)
}

// OpenValue returns the record value a store read for key: stored opened by s
// when key's kind is [Kind.Secret] and s is not nil, otherwise stored itself.
// Stores call it on every value they read.
//
// A store without a Sealer that reads a value sealed by the AES-GCM sealer
// gets an error matching [ErrCannotOpen] rather than ciphertext posing as a
// record. A store with a Sealer never accepts an unsealed secret record:
// otherwise whoever can write the database could plant one.
func OpenValue(s Sealer, key Key, stored []byte) ([]byte, error) {
	if !key.Kind.Secret() {
		return stored, nil
	}
	if s == nil {
		if bytes.HasPrefix(stored, []byte(sealMagic)) {
			return nil, fmt.Errorf("%w %s: it is sealed and the store has no sealer", ErrCannotOpen, key)
		}
		return stored, nil
	}
	return s.Open(key, stored)
}

const (
	sealMagic    = "\x00pks1" // format version 1
	sealIDLen    = 8
	sealNonceLen = 12
	sealTagLen   = 16
	sealKeyLen   = 32 // AES-256
)

// AESGCMSealer is a [Sealer] that seals with AES-256-GCM under keys the
// application supplies. The first key seals; every key opens, so keys can be
// rotated: put the new key first and keep the old ones until every record has
// been written again. Create one with [NewAESGCMSealer].
//
// Printing or logging an AESGCMSealer shows the IDs of its keys, never the
// keys.
type AESGCMSealer struct {
	ids   [][sealIDLen]byte // ids[0] seals
	aeads map[[sealIDLen]byte]cipher.AEAD
}

// NewAESGCMSealer returns a sealer with the given 32-byte AES-256 keys,
// which should come from a secret manager or from crypto/rand, never from a
// password. keys[0] seals new values; all of them open. The sealer keeps its
// own copy of the keys.
func NewAESGCMSealer(keys ...[]byte) (*AESGCMSealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("keystore: AES-GCM sealer needs at least one key")
	}
	s := &AESGCMSealer{aeads: make(map[[sealIDLen]byte]cipher.AEAD, len(keys))}
	for i, k := range keys {
		if len(k) != sealKeyLen {
			return nil, fmt.Errorf("keystore: AES-GCM sealer key %d is %d bytes long; want %d", i, len(k), sealKeyLen)
		}
		block, err := aes.NewCipher(bytes.Clone(k))
		if err != nil {
			return nil, fmt.Errorf("keystore: AES-GCM sealer key %d: %w", i, err)
		}
		aead, err := cipher.NewGCMWithRandomNonce(block)
		if err != nil {
			return nil, fmt.Errorf("keystore: AES-GCM sealer key %d: %w", i, err)
		}
		id := sealKeyID(k)
		if _, dup := s.aeads[id]; dup {
			return nil, fmt.Errorf("keystore: AES-GCM sealer key %d is given twice", i)
		}
		s.ids = append(s.ids, id)
		s.aeads[id] = aead
	}
	return s, nil
}

// sealKeyID names a key without revealing it.
func sealKeyID(key []byte) [sealIDLen]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("poppy keystore sealing key id"))
	var id [sealIDLen]byte
	copy(id[:], m.Sum(nil))
	return id
}

// sealAD returns the associated data: the header and every field of key,
// each prefixed with its length so that no two keys give the same bytes.
func sealAD(header []byte, key Key) []byte {
	ad := bytes.Clone(header)
	for _, f := range []string{string(key.Kind), key.User, key.Issuer, key.ID} {
		ad = binary.BigEndian.AppendUint32(ad, uint32(len(f)))
		ad = append(ad, f...)
	}
	return ad
}

// Seal encrypts plaintext for key with the first key of s.
func (s *AESGCMSealer) Seal(key Key, plaintext []byte) ([]byte, error) {
	if len(s.ids) == 0 {
		return nil, errors.New("keystore: AESGCMSealer has no keys; create it with NewAESGCMSealer")
	}
	id := s.ids[0]
	header := append([]byte(sealMagic), id[:]...)
	out := make([]byte, 0, len(header)+sealNonceLen+len(plaintext)+sealTagLen)
	out = append(out, header...)
	return s.aeads[id].Seal(out, nil, plaintext, sealAD(header, key)), nil
}

// Open checks and decrypts a value that Seal returned for the same key, with
// whichever key of s sealed it. Its errors match [ErrCannotOpen].
func (s *AESGCMSealer) Open(key Key, sealed []byte) ([]byte, error) {
	hlen := len(sealMagic) + sealIDLen
	if !bytes.HasPrefix(sealed, []byte(sealMagic)) {
		return nil, fmt.Errorf("%w %s: the stored value is not sealed", ErrCannotOpen, key)
	}
	if len(sealed) < hlen+sealNonceLen+sealTagLen {
		return nil, fmt.Errorf("%w %s: the sealed value is truncated", ErrCannotOpen, key)
	}
	var id [sealIDLen]byte
	copy(id[:], sealed[len(sealMagic):hlen])
	aead, ok := s.aeads[id]
	if !ok {
		return nil, fmt.Errorf("%w %s: it was sealed with key %x, which this sealer does not have", ErrCannotOpen, key, id)
	}
	plain, err := aead.Open(nil, nil, sealed[hlen:], sealAD(sealed[:hlen], key))
	if err != nil {
		return nil, fmt.Errorf("%w %s with key %x: authentication failed (the value was altered or belongs to another record)", ErrCannotOpen, key, id)
	}
	if plain == nil {
		plain = []byte{} // an empty record, not a missing one
	}
	return plain, nil
}

// KeyIDs returns the hexadecimal IDs of the sealer's keys, the sealing key
// first. They identify keys without revealing them, for logs and for
// checking which key sealed a stored value.
func (s AESGCMSealer) KeyIDs() []string {
	out := make([]string, len(s.ids))
	for i, id := range s.ids {
		out[i] = hex.EncodeToString(id[:])
	}
	return out
}

// String describes the sealer by its key IDs; it never shows a key.
func (s AESGCMSealer) String() string {
	return fmt.Sprintf("keystore.AESGCMSealer(keys %v)", s.KeyIDs())
}

// GoString is String, so %#v shows no key either.
func (s AESGCMSealer) GoString() string { return s.String() }

// Format prints String for every verb, so no verb or flag shows a key.
func (s AESGCMSealer) Format(f fmt.State, verb rune) { fmt.Fprint(f, s.String()) }

// LogValue logs String, never a key.
func (s AESGCMSealer) LogValue() slog.Value { return slog.StringValue(s.String()) }

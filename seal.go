package fleet

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
)

// Payloads sealed at rest: a queue with QueueOptions.Sealer stores each
// task's payload, result and progress sealed, so that Redis (its memory,
// its AOF and RDB files, its replicas, a MONITOR) holds no clear text of
// them. fleet seals the JSON it would have stored and stores, in its
// place, one JSON string (docs/SCHEMA.md, "Sealed values"):
//
//	"fleet:sealed:1:<key id>:<base64url of what the Sealer returned>"
//
// (no character of it needs escaping in JSON, so a client that decodes
// and encodes a body again, as Lua's cjson does, leaves it as it was).
// The key id is in the clear, so that a process holding several keys
// opens each value with the key that sealed it (rotation: seal with the
// newest, open with any). The additional data bound to each value is the
// queue's name and what the value is ("payload", "result", "progress"):
// a value copied into another queue, or from a payload into a result,
// does not open.

// ErrSealed is returned when a sealed value cannot be opened: its key id
// is unknown to the queue's Sealer, the key is wrong, the value was
// altered (authentication failed), or this process has no Sealer for its
// queue. A worker that reserves a task whose payload it cannot open moves
// it to the dead letters with this reason (it never loops). Nothing
// stored is changed by the failed open.
var ErrSealed = newSentinel("sealed value cannot be opened", nil)

// A Sealer seals and opens what fleet stores of a queue's tasks
// (QueueOptions.Sealer). Keyring is the one fleet ships (AES-256-GCM);
// implement Sealer to seal with a key service instead. Its methods must
// be safe for concurrent use.
type Sealer interface {
	// Seal seals plain, bound to aad (which Open is given unchanged),
	// with the Sealer's newest key: it returns that key's id (1 to 64 of
	// A-Z a-z 0-9 . _ -) and the sealed bytes.
	Seal(plain, aad []byte) (keyID string, sealed []byte, err error)
	// Open returns the plain bytes that Seal sealed under keyID with aad.
	// An unknown key id, a wrong key or an altered value is an error
	// (wrap ErrSealed to let callers tell it).
	Open(keyID string, sealed, aad []byte) ([]byte, error)
}

// Key is one AES-256 key of a Keyring: its id, stored in the clear with
// each value it seals, and its 32 secret bytes.
type Key struct {
	// ID names the key: 1 to 64 of A-Z a-z 0-9 . _ - (for example
	// "2026-12"). It must never name another secret.
	ID string
	// Secret is the key: 32 random bytes (crypto/rand).
	Secret []byte
}

// Keyring is a Sealer with AES-256-GCM (crypto/aes, crypto/cipher) under
// keys by id: it seals with its newest key and opens with any of its
// keys. Each seal draws a random 96-bit nonce, so a key should seal fewer
// than 2^32 values: rotate keys well before (a key a month at 1,000
// tasks/s seals 2.6e9 payloads and results). A value costs 28 bytes more
// than its clear JSON, then 4/3 for base64, plus the key id. A Keyring
// is safe for concurrent use.
type Keyring struct {
	newest string
	aeads  map[string]cipher.AEAD
}

// NewKeyring returns a Keyring that seals with newest and opens values
// sealed with newest or with any of older: rotate by making the new key
// newest and the old one older, in every process, then drop the old key
// once no task sealed with it is left (its dead letters and retained
// results included). It returns ErrInvalidOptions for a key whose id is
// empty, too long or holds other characters, whose secret is not 32
// bytes, or whose id repeats.
func NewKeyring(newest Key, older ...Key) (*Keyring, error) {
	k := &Keyring{newest: newest.ID, aeads: make(map[string]cipher.AEAD, 1+len(older))}
	for _, key := range append([]Key{newest}, older...) {
		if err := checkKeyID(key.ID); err != nil {
			return nil, err
		}
		if len(key.Secret) != 32 {
			return nil, fmt.Errorf("%w: key %q has a secret of %d bytes; AES-256 needs 32", ErrInvalidOptions, key.ID, len(key.Secret))
		}
		if _, dup := k.aeads[key.ID]; dup {
			return nil, fmt.Errorf("%w: key id %q given twice", ErrInvalidOptions, key.ID)
		}
		block, err := aes.NewCipher(key.Secret)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrInvalidOptions, key.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrInvalidOptions, key.ID, err)
		}
		k.aeads[key.ID] = aead
	}
	return k, nil
}

// Seal seals plain with the newest key: a random nonce, then the
// ciphertext and its tag.
func (k *Keyring) Seal(plain, aad []byte) (string, []byte, error) {
	aead := k.aeads[k.newest]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return "", nil, fmt.Errorf("sealing: %w", err)
	}
	return k.newest, aead.Seal(out, out, plain, aad), nil
}

// Open opens what Seal sealed with the key keyID.
func (k *Keyring) Open(keyID string, sealed, aad []byte) ([]byte, error) {
	aead, ok := k.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not in the keyring", ErrSealed, keyID)
	}
	n := aead.NonceSize()
	if len(sealed) < n+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d sealed bytes under key %q, too short", ErrSealed, len(sealed), keyID)
	}
	plain, err := aead.Open(nil, sealed[:n], sealed[n:], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: under key %q: authentication failed (a wrong key, or the value was altered)", ErrSealed, keyID)
	}
	return plain, nil
}

func checkKeyID(id string) error {
	ok := len(id) > 0 && len(id) <= 64
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: key id %q: want 1 to 64 of A-Z a-z 0-9 . _ -", ErrInvalidOptions, id)
	}
	return nil
}

// What a sealed value is, bound to it as additional data.
const (
	sealPayload  = "payload"
	sealResult   = "result"
	sealProgress = "progress"
	sealLog      = "log"
	sealStep     = "step"
)

// sealedPrefix begins every sealed value as stored: a JSON string.
const sealedPrefix = `"fleet:sealed:1:`

// isSealed reports whether raw, a stored JSON value, is sealed.
func isSealed(raw []byte) bool { return bytes.HasPrefix(raw, []byte(sealedPrefix)) }

// sealAAD is the additional data of a queue's value of a kind.
func sealAAD(queue, kind string) []byte { return []byte("fleet\x00" + queue + "\x00" + kind) }

// seal returns the stored form of plain JSON for queue and kind: plain
// itself when s is nil, else the sealed JSON string.
func seal(s Sealer, queue, kind string, plain []byte) ([]byte, error) {
	if s == nil {
		return plain, nil
	}
	id, sealed, err := s.Seal(plain, sealAAD(queue, kind))
	if err != nil {
		return nil, fmt.Errorf("sealing the %s: %w", kind, err)
	}
	if err := checkKeyID(id); err != nil {
		return nil, fmt.Errorf("sealing the %s: the Sealer returned %w", kind, err)
	}
	enc := base64.RawURLEncoding
	out := make([]byte, 0, len(sealedPrefix)+len(id)+2+enc.EncodedLen(len(sealed)))
	out = append(out, sealedPrefix...)
	out = append(out, id...)
	out = append(out, ':')
	out = enc.AppendEncode(out, sealed)
	return append(out, '"'), nil
}

// open returns the plain JSON of raw, a stored value of queue and kind:
// raw itself when it is not sealed (a queue sealed since, or never), else
// what s opens. A sealed value with no Sealer, or one that does not open,
// is an ErrSealed.
func open(s Sealer, queue, kind string, raw []byte) ([]byte, error) {
	if !isSealed(raw) {
		return raw, nil
	}
	n := len(raw)
	if n < len(sealedPrefix)+1 || raw[n-1] != '"' {
		return nil, fmt.Errorf("%w: the %s is not a sealed value fleet wrote", ErrSealed, kind)
	}
	kid, body, ok := bytes.Cut(raw[len(sealedPrefix):n-1], []byte{':'})
	id := string(kid)
	if !ok || checkKeyID(id) != nil {
		return nil, fmt.Errorf("%w: the %s is not a sealed value fleet wrote", ErrSealed, kind)
	}
	if s == nil {
		return nil, fmt.Errorf("%w: the %s is sealed (key %q), and this process has no QueueOptions.Sealer for queue %q", ErrSealed, kind, id, queue)
	}
	enc := base64.RawURLEncoding
	sealed := make([]byte, enc.DecodedLen(len(body)))
	m, err := enc.Decode(sealed, body)
	if err != nil {
		return nil, fmt.Errorf("%w: the %s is not a sealed value fleet wrote: %w", ErrSealed, kind, err)
	}
	sealed = sealed[:m]
	plain, err := s.Open(id, sealed, sealAAD(queue, kind))
	if err != nil {
		return nil, fmt.Errorf("opening the %s: %w", kind, err)
	}
	return plain, nil // authenticated: the JSON that seal was given
}

// SealedKeyID returns the id of the key that sealed raw, a value as fleet
// stores it (a TaskRecord's Payload, Result or Progress that this process
// could not open), and whether raw is sealed at all.
func SealedKeyID(raw []byte) (string, bool) {
	if !isSealed(raw) || len(raw) < len(sealedPrefix)+1 {
		return "", false
	}
	id, _, ok := strings.Cut(string(raw[len(sealedPrefix):]), ":")
	return id, ok
}

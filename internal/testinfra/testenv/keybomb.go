package testenv

import (
	"bytes"
	"crypto"
	"encoding/binary"
	"encoding/pem"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/ProtonMail/go-crypto/openpgp/s2k"
)

// OpenPGPArgon2Key makes an armored OpenPGP secret key (ed25519, with a
// signing subkey) encrypted with passphrase through Argon2 S2K, then
// rewrites its S2K parameters to passes and 2^memExp KiB of memory. Keys
// whose derivation would take terabytes can be written without deriving
// them: the key is encrypted with 64 KiB and one pass, so with other
// parameters it no longer decrypts, which a test that checks the bounds
// before any derivation does not need.
func OpenPGPArgon2Key(t testing.TB, passphrase string, passes, memExp uint8) []byte {
	t.Helper()
	cfg := &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA, DefaultHash: crypto.SHA256}
	e, err := openpgp.NewEntity("render", "", "render@example.com", cfg)
	if err != nil {
		t.Fatal(err)
	}
	enc := &packet.Config{AEADConfig: &packet.AEADConfig{}, S2KConfig: &s2k.Config{S2KMode: s2k.Argon2S2K, Argon2Config: &s2k.Argon2Config{NumberOfPasses: 1, DegreeOfParallelism: 1, Memory: 64}}}
	if err := e.EncryptPrivateKeys([]byte(passphrase), enc); err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if err := e.SerializePrivateWithoutSigning(&raw, nil); err != nil {
		t.Fatal(err)
	}
	// The Argon2 specifier: 4, a 16-byte salt, passes 1, parallelism 1,
	// memory exponent 6.
	b, n := raw.Bytes(), 0
	for i := 0; i+19 < len(b); i++ {
		if b[i] == 4 && b[i+17] == 1 && b[i+18] == 1 && b[i+19] == 6 {
			b[i+17], b[i+19] = passes, memExp
			n++
		}
	}
	if n == 0 {
		t.Fatal("no Argon2 S2K specifier found in the key")
	}
	var out bytes.Buffer
	w, err := armor.Encode(&out, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// WithBcryptRounds rewrites the bcrypt KDF rounds of an encrypted OpenSSH
// private key (as ssh-keygen writes it), without deriving anything.
func WithBcryptRounds(t testing.TB, key []byte, rounds uint32) []byte {
	t.Helper()
	block, _ := pem.Decode(key)
	if block == nil || block.Type != "OPENSSH PRIVATE KEY" {
		t.Fatal("not an OpenSSH private key")
	}
	b := block.Bytes
	// openssh-key-v1\0, string cipher, string "bcrypt", string options
	// (string salt, uint32 rounds).
	i := len("openssh-key-v1\x00")
	i += 4 + int(binary.BigEndian.Uint32(b[i:]))
	if string(b[i+4:i+4+6]) != "bcrypt" {
		t.Fatal("the key is not encrypted with bcrypt")
	}
	i += 4 + 6 + 4
	i += 4 + int(binary.BigEndian.Uint32(b[i:]))
	binary.BigEndian.PutUint32(b[i:], rounds)
	return pem.EncodeToMemory(block)
}

package gitstore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"
)

// Signer signs a commit: given the commit's encoding without a signature,
// it returns the armored signature git keeps in the commit's gpgsig header.
// It is go-git's git.Signer.
type Signer interface {
	Sign(message io.Reader) ([]byte, error)
}

// Signing formats, as git's gpg.format names them.
const (
	FormatSSH     = "ssh"
	FormatOpenPGP = "openpgp"
)

// NewSigner reads a private key in the given format (FormatSSH: an
// OpenSSH or PEM private key; FormatOpenPGP: an armored OpenPGP secret
// key), decrypting it with passphrase when it is encrypted. Its errors
// never quote the key.
func NewSigner(format string, key, passphrase []byte) (Signer, error) {
	switch format {
	case FormatSSH:
		return newSSHSigner(key, passphrase)
	case FormatOpenPGP:
		return newOpenPGPSigner(key, passphrase)
	}
	return nil, fmt.Errorf("signing format %q is unknown: use %s or %s", format, FormatSSH, FormatOpenPGP)
}

// sign sets c's signature from s over c's unsigned encoding.
func sign(s Signer, c *object.Commit) error {
	payload := &plumbing.MemoryObject{}
	if err := c.EncodeWithoutSignature(payload); err != nil {
		return err
	}
	r, err := payload.Reader()
	if err != nil {
		return err
	}
	sig, err := s.Sign(r)
	if err != nil {
		return fmt.Errorf("sign commit: %w", err)
	}
	c.PGPSignature = string(sig)
	return nil
}

// sshSigner writes SSH signatures in OpenSSH's SSHSIG format (the one
// `ssh-keygen -Y sign` writes and git verifies with gpg.format=ssh), in
// git's namespace, over the SHA-512 of the message.
type sshSigner struct {
	key ssh.Signer
}

const (
	sshsigMagic     = "SSHSIG"
	sshsigVersion   = 1
	sshsigNamespace = "git"
	sshsigHash      = "sha512"
)

func newSSHSigner(key, passphrase []byte) (Signer, error) {
	var k ssh.Signer
	var err error
	if len(passphrase) > 0 {
		if err := checkBcryptRounds(key); err != nil {
			return nil, err
		}
		k, err = ssh.ParsePrivateKeyWithPassphrase(key, passphrase)
	} else {
		k, err = ssh.ParsePrivateKey(key)
	}
	var missing *ssh.PassphraseMissingError
	switch {
	case errors.As(err, &missing):
		return nil, errors.New("the SSH key is encrypted: add its passphrase as signingKeyPassphrase")
	case errors.Is(err, x509.IncorrectPasswordError):
		return nil, errors.New("the SSH key's passphrase is wrong")
	case err != nil:
		return nil, errors.New("not an SSH private key (OpenSSH or PEM) go can read")
	}
	switch k.PublicKey().Type() {
	case ssh.KeyAlgoED25519, ssh.KeyAlgoRSA, ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521:
	default:
		return nil, fmt.Errorf("SSH key type %s cannot sign commits: use ed25519, ecdsa or rsa", k.PublicKey().Type())
	}
	return &sshSigner{key: k}, nil
}

func (s *sshSigner) Sign(message io.Reader) ([]byte, error) {
	h := sha512.New()
	if _, err := io.Copy(h, message); err != nil {
		return nil, err
	}
	// What is signed: the magic, then the namespace, a reserved string, the
	// hash's name and the message's hash, each as an SSH string.
	signed := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Namespace, Reserved, Hash string
		Digest                    []byte
	}{sshsigNamespace, "", sshsigHash, h.Sum(nil)})...)
	var sig *ssh.Signature
	var err error
	if as, ok := s.key.(ssh.AlgorithmSigner); ok && s.key.PublicKey().Type() == ssh.KeyAlgoRSA {
		// ssh-rsa signatures are SHA-1, which OpenSSH refuses for SSHSIG.
		sig, err = as.SignWithAlgorithm(rand.Reader, signed, ssh.KeyAlgoRSASHA512)
	} else {
		sig, err = s.key.Sign(rand.Reader, signed)
	}
	if err != nil {
		return nil, err
	}
	blob := append([]byte(sshsigMagic), ssh.Marshal(struct {
		Version   uint32
		PublicKey []byte
		Namespace string
		Reserved  string
		Hash      string
		Signature []byte
	}{sshsigVersion, s.key.PublicKey().Marshal(), sshsigNamespace, "", sshsigHash, ssh.Marshal(sig)})...)
	return armorSSH(blob), nil
}

// armorSSH is the SSHSIG armor: base64 in lines of 70, between BEGIN and
// END lines.
func armorSSH(blob []byte) []byte {
	enc := base64.StdEncoding.EncodeToString(blob)
	var b bytes.Buffer
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n-----END SSH SIGNATURE-----\n")
	return b.Bytes()
}

// openPGPSigner writes armored detached OpenPGP signatures, as gpg does
// for git.
type openPGPSigner struct {
	entity *openpgp.Entity
}

func newOpenPGPSigner(key, passphrase []byte) (Signer, error) {
	ents, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(key))
	if err != nil || len(ents) == 0 {
		return nil, errors.New("not an armored OpenPGP key (-----BEGIN PGP PRIVATE KEY BLOCK-----)")
	}
	if len(ents) > 1 {
		return nil, fmt.Errorf("the OpenPGP key block holds %d keys: give exactly one", len(ents))
	}
	e := ents[0]
	if e.PrivateKey == nil {
		return nil, errors.New("the OpenPGP key is a public key: give the secret key")
	}
	if e.PrivateKey.Encrypted {
		if len(passphrase) == 0 {
			return nil, errors.New("the OpenPGP key is encrypted: add its passphrase as signingKeyPassphrase")
		}
		if err := checkS2K(key); err != nil {
			return nil, err
		}
		if err := e.DecryptPrivateKeys(passphrase); err != nil {
			return nil, errors.New("the OpenPGP key's passphrase is wrong")
		}
	}
	if _, ok := e.SigningKey(time.Now()); !ok {
		return nil, errors.New("the OpenPGP key has no usable signing key (expired or revoked?)")
	}
	return &openPGPSigner{entity: e}, nil
}

func (s *openPGPSigner) Sign(message io.Reader) ([]byte, error) {
	var b bytes.Buffer
	if err := openpgp.ArmoredDetachSign(&b, s.entity, message, &packet.Config{}); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// The cost of deriving a key from its passphrase is chosen by the key: its
// OpenPGP S2K parameters (Argon2's memory and passes, the iterated hash's
// byte count) or its OpenSSH KDF rounds. A key comes from a Secret, so
// these are bounded before anything is derived: an Argon2 setting of 2^31
// KiB would otherwise crash render with an out-of-memory error, and the
// 2048 bcrypt rounds golang.org/x/crypto takes at most run for half a
// minute (it calls more "not an SSH private key").
const (
	// maxArgon2KiB bounds the memory of one Argon2 derivation: 256 MiB
	// (RFC 9580 recommends 2 GiB, or 64 MiB where memory is short, as in a
	// sidecar).
	maxArgon2KiB = 256 << 10
	// maxS2KWork bounds all the derivations of an OpenPGP key block
	// together, in KiB: Argon2's memory times its passes, plus the bytes
	// the iterated hash reads (at most 62 MiB each). 1 GiB is about a
	// second's work.
	maxS2KWork = 1 << 20
	// maxBcryptRounds bounds an OpenSSH key's bcrypt KDF rounds
	// (ssh-keygen -a; its default is 16, about 14 ms each).
	maxBcryptRounds = 256
)

// checkBcryptRounds refuses an OpenSSH private key whose bcrypt KDF asks
// for more than maxBcryptRounds rounds. Keys in other shapes are left to
// the parser.
func checkBcryptRounds(key []byte) error {
	block, _ := pem.Decode(key)
	const magic = "openssh-key-v1\x00"
	if block == nil || block.Type != "OPENSSH PRIVATE KEY" || !bytes.HasPrefix(block.Bytes, []byte(magic)) {
		return nil
	}
	var head struct {
		Cipher, KDF, KDFOptions string
		Rest                    []byte `ssh:"rest"`
	}
	if err := ssh.Unmarshal(block.Bytes[len(magic):], &head); err != nil || head.KDF != "bcrypt" {
		return nil
	}
	var opts struct {
		Salt   string
		Rounds uint32
	}
	if err := ssh.Unmarshal([]byte(head.KDFOptions), &opts); err != nil {
		return nil
	}
	if opts.Rounds > maxBcryptRounds {
		return fmt.Errorf("the SSH key's passphrase derivation (bcrypt) asks for %d rounds; render allows at most %d: encrypt the key again with fewer (ssh-keygen -p -a 16)", opts.Rounds, maxBcryptRounds)
	}
	return nil
}

// checkS2K refuses an armored OpenPGP key block whose encrypted secret
// keys ask, to derive their keys from the passphrase, for more than
// maxArgon2KiB of memory in one derivation or more than maxS2KWork in all.
// It reads the S2K specifiers from the packets themselves; go-crypto keeps
// them to itself and derives without a bound.
func checkS2K(key []byte) error {
	block, err := armor.Decode(bytes.NewReader(key))
	if err != nil {
		return nil // the key ring's parse says what is wrong
	}
	r := packet.NewOpaqueReader(block.Body)
	var work uint64
	seen := map[string]bool{} // go-crypto derives once per specifier
	for {
		op, err := r.Next()
		if err != nil {
			break
		}
		if op.Tag != 5 && op.Tag != 7 { // secret key, secret subkey
			continue
		}
		spec, err := s2kSpecifier(op)
		if err != nil {
			return err
		}
		if len(spec) == 0 || seen[string(spec)] {
			continue
		}
		seen[string(spec)] = true
		switch spec[0] {
		case 3: // iterated and salted: hash, salt (8), coded count
			if len(spec) < 11 {
				return errBadS2K
			}
			c := uint64(spec[10])
			work += ((16 + c&15) << ((c >> 4) + 6)) >> 10
		case 4: // Argon2: salt (16), passes, parallelism, memory exponent
			if len(spec) < 20 {
				return errBadS2K
			}
			passes, memKiB := uint64(spec[17]), uint64(1)<<min(spec[19], 63)
			if memKiB > maxArgon2KiB {
				return fmt.Errorf("the OpenPGP key's passphrase derivation (Argon2) asks for %s of memory; render allows at most %s: encrypt the key again with less", kib(memKiB), kib(maxArgon2KiB))
			}
			work += passes * memKiB
		}
		if work > maxS2KWork {
			return fmt.Errorf("the OpenPGP key's passphrase derivations ask for more work than render allows (Argon2 memory times passes, plus iterated hashing, at most %s in all): encrypt the key again with smaller parameters", kib(maxS2KWork))
		}
	}
	return nil
}

var errBadS2K = errors.New("the OpenPGP key's passphrase derivation (S2K) cannot be read")

// s2kSpecifier is the S2K specifier of a secret key packet that is
// encrypted with one (nil otherwise): the bytes after the public key's
// fields, its S2K usage octet and what that octet says follows (RFC 9580,
// section 5.5.3).
func s2kSpecifier(op *packet.OpaquePacket) ([]byte, error) {
	p, err := op.Parse()
	if err != nil {
		return nil, nil // the key ring's parse says what is wrong
	}
	pk, ok := p.(*packet.PrivateKey)
	if !ok || !pk.Encrypted {
		return nil, nil
	}
	// The public key's fields as go-crypto serializes them are the ones it
	// parsed at the packet's start.
	var pub bytes.Buffer
	if err := pk.PublicKey.Serialize(&pub); err != nil {
		return nil, errBadS2K
	}
	pop, err := packet.NewOpaqueReader(&pub).Next()
	if err != nil || !bytes.HasPrefix(op.Contents, pop.Contents) || len(op.Contents) == len(pop.Contents) {
		return nil, errBadS2K
	}
	rest := op.Contents[len(pop.Contents):]
	usage, i := rest[0], 1
	if pk.Version == 5 || (pk.Version == 6 && usage != 0) {
		i++ // the length of the fields that follow
	}
	switch usage {
	case 253, 254, 255:
	default:
		return nil, nil // no S2K specifier
	}
	i++ // the cipher
	if usage == 253 {
		i++ // the AEAD mode
	}
	if pk.Version == 6 {
		i++ // the specifier's length
	}
	if i >= len(rest) {
		return nil, errBadS2K
	}
	return rest[i:], nil
}

// kib writes a size given in KiB in the largest unit that keeps it whole.
func kib(n uint64) string {
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		if n < 1024 || n%1024 != 0 {
			return fmt.Sprintf("%d %s", n, u)
		}
		n /= 1024
	}
	return fmt.Sprintf("%d EiB", n)
}

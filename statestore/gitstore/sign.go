package gitstore

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
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

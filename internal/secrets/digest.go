package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
)

// digestPrefix names the digest's algorithm and the layout of what it
// covers; a different layout gets a different prefix, so an old digest
// never matches by accident.
const digestPrefix = "hmac-sha256:v1:"

// Digest is the keyed digest render keeps in a workload's record for a
// file it encrypted (statestore.SealedFile.Plain): HMAC-SHA256, keyed with
// the destination's digest key, of the file's path in the store, the age
// recipients it was encrypted to and its plaintext, each preceded by its
// length. The next render computes it again and keeps the stored
// ciphertext when it is the same: same plaintext, same path, same
// recipients. Without the key (which render reads from a platform Secret,
// never from the store) the digest says nothing about the plaintext: it
// cannot be used to test guesses of a value, as an unkeyed hash could.
func Digest(key []byte, path string, recipients []string, plaintext []byte) string {
	m := hmac.New(sha256.New, key)
	part(m, []byte(path))
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(recipients)))
	m.Write(n[:])
	for _, r := range recipients {
		part(m, []byte(r))
	}
	part(m, plaintext)
	return digestPrefix + hex.EncodeToString(m.Sum(nil))
}

// part writes b's length, then b.
func part(m hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	m.Write(n[:])
	m.Write(b)
}

// storedDigest is the SHA-256 of bytes render wrote
// (statestore.SealedFile.Stored): ciphertext, so nothing it says helps
// guess a value. It tells the next render that the store still holds what
// it wrote.
func storedDigest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

package inputs

import (
	"fmt"
	"slices"
	"strings"

	"filippo.io/age"
)

// What a destination does with the Secrets a workflow writes
// (spec.secrets.policy of a Destination).
const (
	// SecretsEncrypt encrypts every Secret with SOPS to the destination's
	// age recipients before it is written: its data and stringData are
	// ciphertext in the store, and Flux's kustomize-controller decrypts
	// them on the worker.
	SecretsEncrypt = "encrypt"
	// SecretsRefuse makes a plaintext Secret in the output bad input (exit
	// 2, nothing written). Secrets the workflow encrypted with SOPS itself
	// pass. It is the default: a platform that says nothing writes no
	// plaintext Secret by accident.
	SecretsRefuse = "refuse"
	// SecretsAllow writes Secrets as they are, readable by everyone who can
	// read the store (render before spec.secrets existed).
	SecretsAllow = "allow"
)

// DefaultDecryptionSecret is the worker's Secret holding the age private
// key Flux decrypts with, when spec.secrets.sops.decryptionSecretRef names
// none.
const DefaultDecryptionSecret = "sops-age"

// AgeKeyFile is the key of the worker's decryption Secret that holds the
// age private key: kustomize-controller reads every key ending in .agekey.
const AgeKeyFile = "age.agekey"

// DigestKeyField is the key of the Secret spec.secrets.sops.digestKeyRef
// names: render's key for the digests it keeps of what it encrypted.
const DigestKeyField = "digestKey"

// MinDigestKeyBytes is the shortest digest key accepted: a key short
// enough to guess would let whoever reads the store test guesses of a
// Secret's value against its digest.
const MinDigestKeyBytes = 32

// SecretsSpec is a Destination's spec.secrets: what render does with the
// Secrets a workflow writes to it.
type SecretsSpec struct {
	// Policy is encrypt, refuse (the default) or allow.
	Policy string `yaml:"policy"`
	// SOPS is how Secrets are encrypted (policy encrypt).
	SOPS *SOPSSpec `yaml:"sops"`
}

// SOPSSpec is how a destination's Secrets are encrypted: SOPS, the age
// recipients whose private keys decrypt them (public keys only), render's
// digest key, and the worker's Secret Flux decrypts with.
type SOPSSpec struct {
	Age struct {
		// Recipients are age public keys (age1...): the worker's, and any
		// others that should be able to read the Secrets (a break-glass key).
		Recipients []string `yaml:"recipients"`
	} `yaml:"age"`
	// DigestKeyRef names the platform Secret whose digestKey keys the
	// digests render keeps beside its record, so that an unchanged Secret
	// keeps its ciphertext (SOPS output is random): a random value of 32
	// bytes or more, which only render reads.
	DigestKeyRef *SecretRef `yaml:"digestKeyRef"`
	// DecryptionSecretRef names the worker's Secret (in Flux's namespace)
	// holding the age private key as age.agekey; render bootstrap flux puts
	// it in the Kustomizations' decryption. Default sops-age.
	DecryptionSecretRef *struct {
		Name string `yaml:"name"`
	} `yaml:"decryptionSecretRef"`
}

// SecretsPolicy is a destination's spec.secrets, checked and with its
// defaults.
type SecretsPolicy struct {
	// Policy is SecretsEncrypt, SecretsRefuse or SecretsAllow.
	Policy string
	// Recipients are the age recipients (policy encrypt), sorted, without
	// duplicates.
	Recipients []string
	// DigestKeyRef names the Secret holding the digest key (policy encrypt).
	DigestKeyRef *SecretRef
	// DecryptionSecret is the worker's Secret Flux decrypts with.
	DecryptionSecret string
}

// Encrypts reports whether the destination encrypts its Secrets.
func (s SecretsPolicy) Encrypts() bool { return s.Policy == SecretsEncrypt }

// SecretsPolicy returns destination dest's policy for Secrets: refuse
// when its spec.secrets says none.
func (p *Platform) SecretsPolicy(dest string) SecretsPolicy {
	if s, ok := p.secretPolicies[dest]; ok {
		return s
	}
	return SecretsPolicy{Policy: SecretsRefuse}
}

// SecretsPolicySet reports whether destination dest has a spec.secrets
// (the policy is not the default).
func (p *Platform) SecretsPolicySet(dest string) bool {
	_, ok := p.secretPolicies[dest]
	return ok
}

// addSecretsPolicy checks and keeps a Destination's spec.secrets. Its
// errors name the field; a value that looks like an age private key is
// never quoted.
func (p *Platform) addSecretsPolicy(dest string, spec *SecretsSpec) error {
	if p.secretPolicies == nil {
		p.secretPolicies = map[string]SecretsPolicy{}
	}
	pol, err := checkSecretsSpec(spec)
	if err != nil || spec == nil {
		return err
	}
	p.secretPolicies[dest] = pol
	return nil
}

func checkSecretsSpec(spec *SecretsSpec) (SecretsPolicy, error) {
	out := SecretsPolicy{Policy: SecretsRefuse}
	if spec == nil {
		return out, nil
	}
	if spec.Policy != "" {
		out.Policy = spec.Policy
	}
	switch out.Policy {
	case SecretsEncrypt:
	case SecretsRefuse, SecretsAllow:
		if spec.SOPS != nil {
			return out, fmt.Errorf("spec.secrets.sops is set but spec.secrets.policy is %s: set policy: encrypt to encrypt Secrets, or remove sops", out.Policy)
		}
		return out, nil
	default:
		return out, fmt.Errorf("spec.secrets.policy %q is unknown: use encrypt, refuse or allow", spec.Policy)
	}
	if spec.SOPS == nil || len(spec.SOPS.Age.Recipients) == 0 {
		return out, fmt.Errorf("spec.secrets.sops.age.recipients is empty: policy encrypt needs at least one age public key (age-keygen -y on the worker's key prints it)")
	}
	seen := map[string]bool{}
	for i, r := range spec.SOPS.Age.Recipients {
		field := fmt.Sprintf("spec.secrets.sops.age.recipients[%d]", i)
		r = strings.TrimSpace(r)
		if err := CheckAgeRecipient(r); err != nil {
			return out, fmt.Errorf("%s: %v", field, err)
		}
		if !seen[r] {
			seen[r] = true
			out.Recipients = append(out.Recipients, r)
		}
	}
	slices.Sort(out.Recipients)
	ref := spec.SOPS.DigestKeyRef
	if ref == nil || ref.Name == "" {
		return out, fmt.Errorf("spec.secrets.sops.digestKeyRef is missing: name a platform Secret whose %s is %d or more random bytes (render keys the digests it keeps of each Secret with it, so that an unchanged Secret is not encrypted again on every render)", DigestKeyField, MinDigestKeyBytes)
	}
	out.DigestKeyRef = ref
	out.DecryptionSecret = DefaultDecryptionSecret
	if d := spec.SOPS.DecryptionSecretRef; d != nil {
		if d.Name == "" {
			return out, fmt.Errorf("spec.secrets.sops.decryptionSecretRef.name is empty")
		}
		out.DecryptionSecret = d.Name
	}
	return out, nil
}

// CheckAgeRecipient checks that r is an age X25519 public key (age1...),
// the kind of recipient Flux's kustomize-controller holds the identity of.
// Its error never quotes r: a private key pasted by mistake must not be
// printed.
func CheckAgeRecipient(r string) error {
	switch {
	case r == "":
		return fmt.Errorf("is empty: give an age public key (age1...)")
	case strings.HasPrefix(strings.ToUpper(r), "AGE-SECRET-KEY-"):
		return fmt.Errorf("is an age private key: platform documents hold public keys only; give the public key (age-keygen -y prints it), and keep the private key on the worker only (Secret %s, key %s)", DefaultDecryptionSecret, AgeKeyFile)
	case strings.HasPrefix(r, "ssh-"):
		return fmt.Errorf("is an SSH key: Flux decrypts with age identities only; give an age public key (age1...)")
	}
	if _, err := age.ParseX25519Recipient(r); err != nil {
		return fmt.Errorf("is not an age public key (age1... in Bech32, 62 characters)")
	}
	return nil
}

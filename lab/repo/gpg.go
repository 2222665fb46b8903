package repo

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/jiocloud/orchestrate/lab/internal/labenv"
)

// gpg runs gpg in batch mode on the lab's GNUPGHOME home.
func gpg(ctx context.Context, home string, args ...string) ([]byte, error) {
	return labenv.Output(ctx, "", []string{"GNUPGHOME=" + home},
		"gpg", append([]string{"--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""}, args...)...)
}

// signingKey returns the fingerprint and the armoured public key of the
// lab's repository key in home, generating it (Ed25519, signing only, no
// expiry, no passphrase) the first time.
func signingKey(ctx context.Context, home string) (fpr, pub string, err error) {
	fpr, err = keyFingerprint(ctx, home)
	if err != nil {
		return "", "", err
	}
	if fpr == "" {
		if _, err := gpg(ctx, home, "--quick-generate-key", KeyUID, "ed25519", "sign", "never"); err != nil {
			return "", "", fmt.Errorf("generate the lab's signing key: %w", err)
		}
		if fpr, err = keyFingerprint(ctx, home); err != nil {
			return "", "", err
		}
		if fpr == "" {
			return "", "", fmt.Errorf("gpg made no secret key %q in %s", KeyUID, home)
		}
	}
	b, err := gpg(ctx, home, "--armor", "--export", fpr)
	if err != nil {
		return "", "", err
	}
	if !strings.HasPrefix(string(b), "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
		return "", "", fmt.Errorf("gpg --export %s printed no armoured key", fpr)
	}
	return fpr, string(b), nil
}

// keyFingerprint is the fingerprint of the secret key KeyUID in home, or
// "" when there is none.
func keyFingerprint(ctx context.Context, home string) (string, error) {
	b, err := gpg(ctx, home, "--with-colons", "--list-secret-keys")
	if err != nil {
		return "", fmt.Errorf("list the keys in %s: %w", home, err)
	}
	// sec:...\nfpr:::::::::FPR:\n...uid:...:KeyUID:...
	var fpr, found string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		switch {
		case f[0] == "sec":
			fpr = ""
		case f[0] == "fpr" && fpr == "" && len(f) > 9:
			fpr = f[9]
		case f[0] == "uid" && len(f) > 9 && f[9] == KeyUID && found == "":
			found = fpr
		}
	}
	return found, nil
}

// sign writes InRelease (clear-signed) and Release.gpg (detached,
// armoured) for dir's Release with the key fpr.
func sign(ctx context.Context, home, fpr, dir string) error {
	release := filepath.Join(dir, "Release")
	common := []string{"--yes", "--local-user", fpr, "--digest-algo", "SHA512"}
	if _, err := gpg(ctx, home, append(common, "--clearsign", "--output", filepath.Join(dir, "InRelease"), release)...); err != nil {
		return fmt.Errorf("sign Release: %w", err)
	}
	if _, err := gpg(ctx, home, append(common, "--armor", "--detach-sign", "--output", filepath.Join(dir, "Release.gpg"), release)...); err != nil {
		return fmt.Errorf("sign Release: %w", err)
	}
	return nil
}

package stream

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
)

// SignatureHeader carries a message's signature (contract section 7): labeling
// sets it on every message, whatever the broker's configuration, so a consumer
// applies only what the holder of EVENTS_TOKEN published, even if someone else
// can publish on the stream's subjects.
const SignatureHeader = "Events-Signature"

// signatureVersion prefixes the signature's hex; a later scheme gets another.
const signatureVersion = "v1="

// Sign returns the Events-Signature value of a message: "v1=" and the lowercase
// hex HMAC-SHA256, keyed with key (EVENTS_TOKEN), of subject, "\n", the
// Nats-Msg-Id, "\n" and the body. The subject and the id are covered, so a
// signed body republished on another subject or under another id is refused.
func Sign(key []byte, subject, msgID string, body []byte) string {
	return signatureVersion + hex.EncodeToString(mac(key, subject, msgID, body))
}

// Errors of Verify; each says "signature", which billing_nats_failed's reason keeps.
var (
	ErrSignatureMissing = errors.New("signature missing: no " + SignatureHeader + " header")
	ErrSignatureInvalid = errors.New("signature invalid: " + SignatureHeader + " does not match the message")
)

// Verify reports whether header (the Events-Signature value) signs subject,
// msgID and body with key. The comparison takes the same time whatever the
// header holds, so a forger learns nothing from timing.
func Verify(key []byte, subject, msgID string, body []byte, header string) error {
	if header == "" {
		return ErrSignatureMissing
	}
	got, ok := strings.CutPrefix(header, signatureVersion)
	if !ok {
		return ErrSignatureInvalid
	}
	sum, err := hex.DecodeString(got)
	if err != nil || got != strings.ToLower(got) {
		return ErrSignatureInvalid
	}
	if !hmac.Equal(sum, mac(key, subject, msgID, body)) {
		return ErrSignatureInvalid
	}
	return nil
}

// VerifyAny reports whether header signs subject, msgID and body with one of
// keys (billing's EVENTS_TOKEN first, then EVENTS_TOKEN_PREVIOUS during a
// rotation). Every key is tried, whichever matches, so the time taken says
// nothing about which key signed; an empty key never verifies.
func VerifyAny(keys [][]byte, subject, msgID string, body []byte, header string) error {
	err := ErrSignatureInvalid
	if header == "" {
		err = ErrSignatureMissing
	}
	for _, k := range keys {
		if len(k) == 0 {
			continue
		}
		if Verify(k, subject, msgID, body, header) == nil {
			err = nil
		}
	}
	return err
}

// SignedCloudEvent is what Sign signs of a binary-mode CloudEvent in place of
// the body, since its type and time travel in headers: ce-type, "\n",
// ce-time, "\n" and the body (the values as decoded from their
// percent-encoding). A consumer that verifies a CloudEvent signs the same
// bytes; billing records them as the message's payload in
// billing_nats_failed, so a record verifies again as it arrived.
func SignedCloudEvent(typ, time string, body []byte) []byte {
	out := make([]byte, 0, len(typ)+len(time)+2+len(body))
	out = append(out, typ...)
	out = append(out, '\n')
	out = append(out, time...)
	out = append(out, '\n')
	return append(out, body...)
}

// ParseSignedCloudEvent splits SignedCloudEvent's bytes into type, time and
// body; ok is false when b is not such bytes (a JSON body starts with '{').
func ParseSignedCloudEvent(b []byte) (typ, time string, body []byte, ok bool) {
	t, rest, ok1 := strings.Cut(string(b), "\n")
	tm, data, ok2 := strings.Cut(rest, "\n")
	if !ok1 || !ok2 || t == "" || strings.ContainsAny(t, "{ \t\r") {
		return "", "", nil, false
	}
	return t, tm, []byte(data), true
}

func mac(key []byte, subject, msgID string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(subject))
	h.Write([]byte{'\n'})
	h.Write([]byte(msgID))
	h.Write([]byte{'\n'})
	h.Write(body)
	return h.Sum(nil)
}

package wire

import (
	"io"
	"net/url"
	"slices"
	"strings"
)

// RedactURL is raw as an error text or a log line may quote it: its scheme,
// host and path only (scheme://host/path). Its userinfo, query and fragment
// are dropped whole, since operators put credentials there (user:pw@,
// ?token=…) and Go's own redaction (url.URL.Redacted, the text of a
// url.Error from net/http) hides only the userinfo's password. Text that is
// not a URL is cut the same way by hand, so a setting refused for its syntax
// is still quoted without them. Every URL the operator configures
// (PROVIDER_URL, BILLING_URL, CONSOLE_*_URL) is quoted through it.
func RedactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
		return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}).String()
	}
	// Not parsed, or opaque ("user:pw@host" reads as the scheme "user"): cut
	// at the query or fragment, and drop what precedes the last @ of the
	// authority.
	s := raw
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	scheme, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	authority, path := rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		authority, path = rest[:i], rest[i:]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		authority = authority[i+1:]
	}
	return scheme + authority + path
}

// RedactURLs rewrites the URL of every *url.Error in err's chain with
// RedactURL and returns err: the errors of an http.Client quote the request's
// URL (`Post "…": dial tcp …: connection refused`), query and user name
// included. It changes the errors in place, so it is for errors fresh from a
// call, before they are wrapped, logged or stored; errors.Is and errors.As see
// the same chain as before.
func RedactURLs(err error) error {
	for e := err; e != nil; {
		// Each link is looked at once, by hand: errors.As stops at the first
		// url.Error, and a joined error may hold several.
		if ue, ok := e.(*url.Error); ok { //nolint:errorlint // walks the chain itself
			ue.URL = RedactURL(ue.URL)
		}
		switch w := e.(type) { //nolint:errorlint // walks the chain itself
		case interface{ Unwrap() error }:
			e = w.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range w.Unwrap() {
				_ = RedactURLs(inner)
			}
			return err
		default:
			return err
		}
	}
	return err
}

// minSecret is the shortest value a Scrubber hides: a shorter one is no
// credential, and hiding every "1" or "on" would garble the text.
const minSecret = 4

// Scrubber hides, wherever a text repeats them, the parts of a URL that
// RedactURL drops because they may hold a credential: its raw query, each
// query value and the userinfo's name and password (raw and decoded, each of
// at least 4 bytes), each becoming "***". It is for text that may echo what
// was sent, an answer's body quoted in an error: a provider's error page often
// repeats the request target, query included. The zero Scrubber hides
// nothing.
type Scrubber struct {
	replacer *strings.Replacer
	longest  int // bytes of the longest secret
}

// NewScrubber is the Scrubber of the URL raw (one that does not parse has
// nothing to hide that RedactURL could find either).
func NewScrubber(raw string) Scrubber {
	u, err := url.Parse(raw)
	if err != nil {
		return Scrubber{}
	}
	var secrets []string
	add := func(rawValue, value string) {
		for _, s := range []string{rawValue, value} {
			if len(s) >= minSecret && !slices.Contains(secrets, s) {
				secrets = append(secrets, s)
			}
		}
	}
	add(u.RawQuery, u.RawQuery)
	for pair := range strings.SplitSeq(u.RawQuery, "&") {
		_, v, _ := strings.Cut(pair, "=")
		decoded, err := url.QueryUnescape(v)
		if err != nil {
			decoded = v
		}
		add(v, decoded)
	}
	if u.User != nil {
		rawName, rawPassword, _ := strings.Cut(u.User.String(), ":")
		password, _ := u.User.Password()
		add(rawName, u.User.Username())
		add(rawPassword, password)
	}
	if len(secrets) == 0 {
		return Scrubber{}
	}
	// The longest first: the replacer tries them in this order at each
	// position, so a value inside the query is hidden with the whole query.
	slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
	pairs := make([]string, 0, 2*len(secrets))
	for _, s := range secrets {
		pairs = append(pairs, s, "***")
	}
	return Scrubber{replacer: strings.NewReplacer(pairs...), longest: len(secrets[0])}
}

// Hide is text with every secret of the URL replaced by "***".
func (s Scrubber) Hide(text string) string {
	if s.replacer == nil {
		return text
	}
	return s.replacer.Replace(text)
}

// Snippet is the start of an answer's body for an error text: at most n
// bytes, on one line, valid UTF-8, with the URL's secrets hidden;
// "(empty body)" when there is nothing. It reads at most n bytes plus the
// longest secret, so that a secret the bound would cut is hidden whole before
// the cut.
func (s Scrubber) Snippet(r io.Reader, n int) string {
	b, _ := io.ReadAll(io.LimitReader(r, int64(n+s.longest)))
	text := s.Hide(strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "")), " "))
	if len(text) > n {
		// The cut may split a character: drop the broken bytes.
		text = strings.ToValidUTF8(text[:n], "")
	}
	if text == "" {
		return "(empty body)"
	}
	return text
}

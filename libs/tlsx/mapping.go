package tlsx

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"regexp"
	"strings"
)

// MappingRules map a certificate subject (its distinguished name in RFC 2253
// form, most specific first: "CN=alice,OU=eng,O=Acme") to a principal name,
// as Kafka's ssl.principal.mapping.rules do. The rules are tried in order;
// the first whose pattern matches the whole name gives the principal.
//
//	RULE:pattern/replacement/[L|U]   pattern is a regular expression over
//	                                 the name; replacement may use $1, $2 for
//	                                 its groups; L or U lowercases or
//	                                 uppercases the result
//	DEFAULT                          the whole distinguished name
//
// Rules are separated by commas or new lines; a '/' or ',' inside a pattern
// or replacement is written "\/" or is simply part of the regular expression
// (a comma ends a rule only after the closing '/').
type MappingRules []mappingRule

type mappingRule struct {
	isDefault   bool
	re          *regexp.Regexp
	replacement string
	toCase      byte // 0, 'L' or 'U'
	text        string
}

// ParseMappingRules parses rules; empty text means DEFAULT.
func ParseMappingRules(text string) (MappingRules, error) {
	var rules MappingRules
	s := text
	for {
		s = strings.TrimLeft(s, " \t\r\n,")
		if s == "" {
			break
		}
		var r mappingRule
		switch {
		case strings.HasPrefix(s, "DEFAULT"):
			r = mappingRule{isDefault: true, text: "DEFAULT"}
			s = s[len("DEFAULT"):]
		case strings.HasPrefix(s, "RULE:"):
			rest := s[len("RULE:"):]
			pattern, rest, ok := cutUnescaped(rest)
			if !ok {
				return nil, fmt.Errorf("rule %q: want RULE:pattern/replacement/[LU]", s)
			}
			repl, rest, ok := cutUnescaped(rest)
			if !ok {
				return nil, fmt.Errorf("rule %q: want RULE:pattern/replacement/[LU]", s)
			}
			if rest != "" && (rest[0] == 'L' || rest[0] == 'U') {
				r.toCase = rest[0]
				rest = rest[1:]
			}
			re, err := regexp.Compile(`^(?:` + pattern + `)$`)
			if err != nil {
				return nil, fmt.Errorf("rule pattern %q: %w", pattern, err)
			}
			r.re, r.replacement = re, javaReplacement(repl)
			r.text = s[:len(s)-len(rest)]
			s = rest
		default:
			return nil, fmt.Errorf("%q: each rule is RULE:pattern/replacement/[LU] or DEFAULT", firstLine(s))
		}
		s = strings.TrimLeft(s, " \t")
		if s != "" && s[0] != ',' && s[0] != '\n' && s[0] != '\r' {
			return nil, fmt.Errorf("after %q: unexpected %q (rules are separated by commas)", r.text, firstLine(s))
		}
		rules = append(rules, r)
	}
	if len(rules) == 0 {
		rules = MappingRules{{isDefault: true, text: "DEFAULT"}}
	}
	return rules, nil
}

// cutUnescaped splits s at its first '/' not preceded by a backslash and
// unescapes "\/" in the part before it.
func cutUnescaped(s string) (before, after string, ok bool) {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '/':
			return strings.ReplaceAll(s[:i], `\/`, "/"), s[i+1:], true
		}
	}
	return "", "", false
}

var javaGroupRef = regexp.MustCompile(`\$(\d+)`)

// javaReplacement turns Java's "$1x" (group 1, then x) into Go's "${1}x".
func javaReplacement(s string) string { return javaGroupRef.ReplaceAllString(s, "$${$1}") }

func firstLine(s string) string {
	if i := strings.IndexAny(s, ",\n"); i >= 0 {
		return s[:i]
	}
	return s
}

// Map returns the principal name for a distinguished name, or an error when
// no rule applies (then the caller is not authenticated by its
// certificate).
func (rs MappingRules) Map(dn string) (string, error) {
	for _, r := range rs {
		if r.isDefault {
			return dn, nil
		}
		m := r.re.FindStringSubmatchIndex(dn)
		if m == nil {
			continue
		}
		out := string(r.re.ExpandString(nil, r.replacement, dn, m))
		switch r.toCase {
		case 'L':
			out = strings.ToLower(out)
		case 'U':
			out = strings.ToUpper(out)
		}
		if out == "" {
			return "", fmt.Errorf("rule %s maps %q to an empty principal name", r.text, dn)
		}
		return out, nil
	}
	return "", fmt.Errorf("no principal mapping rule applies to %q", dn)
}

// MapCert maps a certificate's subject.
func (rs MappingRules) MapCert(cert *x509.Certificate) (string, error) {
	return rs.Map(DistinguishedName(cert.Subject))
}

// DistinguishedName writes a subject in RFC 2253 form, most specific
// attribute first ("CN=alice,OU=eng,O=Acme,C=US"), as Kafka's rules see it.
func DistinguishedName(n pkix.Name) string { return n.String() }

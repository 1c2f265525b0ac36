package main

import "strings"

// splitStatements splits a simple-query string at top-level semicolons
// (outside quotes, dollar quotes and comments): pgx's Query runs one
// statement per call (the extended protocol). Empty statements (only
// whitespace and comments) are dropped; an all-empty string is kept whole.
func splitStatements(sql string) []string {
	var out []string
	start, i, n := 0, 0, len(sql)
	substantive := false // the current statement has something besides comments
	flush := func(end int) {
		if substantive {
			out = append(out, sql[start:end])
		}
		substantive = false
	}
	for i < n {
		c := sql[i]
		switch {
		case c == '\'' || c == '"':
			j := i + 1
			for j < n {
				if sql[j] == c {
					if j+1 < n && sql[j+1] == c {
						j += 2
						continue
					}
					break
				}
				j++
			}
			substantive = true
			i = j + 1
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			j := strings.IndexByte(sql[i:], '\n')
			if j < 0 {
				i = n
			} else {
				i += j
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			depth, j := 1, i+2
			for j < n && depth > 0 {
				switch {
				case strings.HasPrefix(sql[j:], "/*"):
					depth++
					j += 2
				case strings.HasPrefix(sql[j:], "*/"):
					depth--
					j += 2
				default:
					j++
				}
			}
			i = j
		case c == '$':
			j := i + 1
			for j < n && (isIdent(sql[j])) {
				j++
			}
			if j < n && sql[j] == '$' && !(j > i+1 && sql[i+1] >= '0' && sql[i+1] <= '9') {
				tag := sql[i : j+1]
				k := strings.Index(sql[j+1:], tag)
				if k < 0 {
					i = n
				} else {
					i = j + 1 + k + len(tag)
				}
			} else {
				i++
			}
			substantive = true
		case c == ';':
			flush(i)
			i++
			start = i
		default:
			if c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' {
				substantive = true
			}
			i++
		}
	}
	if i > n {
		i = n
	}
	flush(n)
	if len(out) == 0 {
		return []string{sql}
	}
	return out
}

func isIdent(b byte) bool {
	return b == '_' || (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9') || b >= 0x80
}

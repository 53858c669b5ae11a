// Command go-oracle answers, for the differential tests of kata_mem/core/golang.py
// (tests/oracle/test_golang_oracle.py), what Go's own strconv and regexp say of a value:
// the parsers Kata's Go runtime reads a pod's annotations with (src/runtime/pkg/oci/utils.go
// setFloat32WithCheck, setUint, setBool, regexpContains) and go-yaml reads a Pod's plain
// scalars with. It reads one JSON case a line on stdin and writes one JSON answer a line on
// stdout, in order, flushed after each, until stdin ends: one process serves a whole test run.
//
//	{"op": "ParseFloat", "text": "1.5", "bits": 32}
//	    -> {"ok": true, "bits": 1069547520}   (math.Float32bits of the result), or
//	    -> {"ok": false, "err": "syntax"|"range", "bits": ...}
//	{"op": "ParseUint", "text": "20", "base": 10, "bits": 64} -> {"ok": true, "value": "20"}
//	{"op": "ParseInt", "text": "-20", "base": 0, "bits": 64}  -> {"ok": true, "value": "-20"}
//	{"op": "ParseBool", "text": "T"}                          -> {"ok": true, "value": "true"}
//	{"op": "MatchString", "pattern": "^a", "text": "ab"}      -> {"ok": true, "match": true}
//	    -> {"ok": false, "err": "error parsing regexp: ..."}  (the pattern does not compile)
//	{"op": "Compile", "text": "a("}                          -> {"ok": false, "err": "error parsing regexp: ..."}
//	{"op": "FormatFloat32", "text": "3/2"}                  -> {"ok": true, "value": "1.5"}
//	    (the float32 nearest the exact fraction, as fmt's %v prints it)
//	{"op": "version"}                                         -> {"ok": true, "value": "go1.26.8"}
//
// Integers travel as decimal strings: a uint64 does not fit a JSON number's float64.
// The Go version is the toolchain's: these are the standard library's answers at that
// version (the test prints it).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"regexp"
	"runtime"
	"strconv"
)

type request struct {
	Op      string `json:"op"`
	Text    string `json:"text"`
	Pattern string `json:"pattern"`
	Base    int    `json:"base"`
	Bits    int    `json:"bits"`
}

type answer struct {
	Ok    bool    `json:"ok"`
	Err   string  `json:"err,omitempty"`
	Value string  `json:"value,omitempty"`
	Bits  *uint64 `json:"bits,omitempty"`
	Match *bool   `json:"match,omitempty"`
}

// kind names a strconv error as the tests compare it: its sentinel, not its text.
func kind(err error) string {
	switch {
	case errors.Is(err, strconv.ErrSyntax):
		return "syntax"
	case errors.Is(err, strconv.ErrRange):
		return "range"
	default:
		return err.Error()
	}
}

func decide(r request) answer {
	switch r.Op {
	case "ParseFloat":
		f, err := strconv.ParseFloat(r.Text, r.Bits)
		var bits uint64
		if r.Bits == 32 {
			bits = uint64(math.Float32bits(float32(f)))
		} else {
			bits = math.Float64bits(f)
		}
		if err != nil {
			return answer{Err: kind(err), Bits: &bits}
		}
		return answer{Ok: true, Bits: &bits}
	case "ParseUint":
		v, err := strconv.ParseUint(r.Text, r.Base, r.Bits)
		if err != nil {
			return answer{Err: kind(err)}
		}
		return answer{Ok: true, Value: strconv.FormatUint(v, 10)}
	case "ParseInt":
		v, err := strconv.ParseInt(r.Text, r.Base, r.Bits)
		if err != nil {
			return answer{Err: kind(err)}
		}
		return answer{Ok: true, Value: strconv.FormatInt(v, 10)}
	case "ParseBool":
		v, err := strconv.ParseBool(r.Text)
		if err != nil {
			return answer{Err: kind(err)}
		}
		return answer{Ok: true, Value: strconv.FormatBool(v)}
	case "MatchString":
		// regexp.MatchString compiles the pattern each time, as Kata's regexpContains
		// calls it; a pattern that does not compile is its error.
		m, err := regexp.MatchString(r.Pattern, r.Text)
		if err != nil {
			return answer{Err: err.Error()}
		}
		return answer{Ok: true, Match: &m}
	case "Compile":
		if _, err := regexp.Compile(r.Text); err != nil {
			return answer{Err: err.Error()}
		}
		return answer{Ok: true}
	case "FormatFloat32":
		exact, ok := new(big.Rat).SetString(r.Text)
		if !ok {
			return answer{Err: "not a fraction"}
		}
		f, _ := exact.Float32()
		return answer{Ok: true, Value: strconv.FormatFloat(float64(f), 'g', -1, 32)}
	case "version":
		return answer{Ok: true, Value: runtime.Version()}
	}
	return answer{Err: fmt.Sprintf("unknown op %q", r.Op)}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "go-oracle: bad case %q: %v\n", in.Text(), err)
			os.Exit(2)
		}
		if err := enc.Encode(decide(r)); err != nil {
			fmt.Fprintf(os.Stderr, "go-oracle: %v\n", err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "go-oracle: %v\n", err)
		os.Exit(1)
	}
}

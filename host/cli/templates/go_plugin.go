// {{name}}: a voodu plugin in Go, made by `vd plugins:new --lang go`.
//
// It owns `{{name}} "LABEL" { ... }` blocks, with one option, `greeting`:
// a string of 1 to 64 bytes, "hello" when the block gives none. Change
// normalise() to take your own options; keep refusals in voodu's style
// (what is wrong, then how to write it).
//
// How it is put together (the guide's "Plugins in Go"):
//   - `go build -buildmode=c-shared` makes lib{{name}}.so; `make` runs it
//     with the header's directory (VOODU_INCLUDE in the Makefile).
//   - vtable.c holds the plugin's table (voodu_plugin_entry_v1) in C: Go
//     cannot export a C struct. Each member there calls one //export
//     function here.
//   - Requests are the host's bytes, for the call only (C.GoBytes copies
//     them); every reply is C memory from C.CBytes, which the host hands
//     back, once, to vtable.c's plugin_free.
//   - A panic here would end the controller: guard() turns it into
//     VOODU_STATUS_PANICKED, and the host reports it as the plugin's.
//   - One process holds one Go runtime: voodu runs the first Go plugin in
//     the controller and every later one in a child process of its own,
//     with the same calls over a socket. Nothing here changes for that.
package main

/*
#include <stdlib.h>
#include "voodu_plugin.h"

// Defined in vtable.c: Go cannot call the host's function pointers.
void voodu_go_log(const VooduHostApi *host, VooduLogLevel level, const char *line, size_t len);
*/
import "C"

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unsafe"
)

// The greeting filled in when a block gives none, and the longest taken.
const (
	defaultGreeting  = "hello"
	maxGreetingBytes = 64
)

// host is the host's callback table, kept from init until shutdown.
var host *C.VooduHostApi

// say writes one line to the controller's log.
func say(level C.VooduLogLevel, line string) {
	if host == nil {
		return
	}
	text := C.CString(line)
	defer C.free(unsafe.Pointer(text))
	C.voodu_go_log(host, level, text, C.size_t(len(line)))
}

// failure is a refusal's or error's reply: the message, and the option at
// fault as a JSON pointer into the block's spec ("/greeting") when one is.
type failure struct {
	Message string `json:"message"`
	Pointer string `json:"pointer,omitempty"`
}

// reply hands `value`, as JSON, to the host as the call's reply.
func reply(out *C.VooduBuffer, status C.VooduStatus, value any) C.VooduStatus {
	encoded, err := json.Marshal(value)
	if err != nil {
		return C.VOODU_STATUS_ERROR
	}
	out.ptr = (*C.uint8_t)(C.CBytes(encoded))
	out.len = C.size_t(len(encoded))
	return status
}

// decode reads a request (the host's bytes) into `into`, numbers kept
// exactly as written.
func decode(request *C.uint8_t, length C.size_t, into any) error {
	decoder := json.NewDecoder(bytes.NewReader(C.GoBytes(unsafe.Pointer(request), C.int(length))))
	decoder.UseNumber()
	return decoder.Decode(into)
}

// guard, deferred first in every call, turns a panic into a PANICKED reply.
func guard(out *C.VooduBuffer, status *C.VooduStatus) {
	if recovered := recover(); recovered != nil {
		*status = reply(out, C.VOODU_STATUS_PANICKED, failure{Message: fmt.Sprintf("panicked: %v", recovered)})
	}
}

// normalise checks `spec` and fills in its default, in place; a refusal
// says what is wrong and where.
func normalise(spec map[string]any) *failure {
	greeting, given := spec["greeting"]
	if !given {
		spec["greeting"] = defaultGreeting
		return nil
	}
	text, isText := greeting.(string)
	if !isText || len(text) == 0 || len(text) > maxGreetingBytes {
		shown, _ := json.Marshal(greeting)
		return &failure{
			Message: fmt.Sprintf("greeting must be a string of 1 to %d bytes, not %.80s — write greeting = \"hello\"", maxGreetingBytes, shown),
			Pointer: "/greeting",
		}
	}
	return nil
}

//export goInit
func goInit(api *C.VooduHostApi) {
	// Runs at every load: no side effects beyond the instance.
	host = api
}

//export goValidate
func goValidate(request *C.uint8_t, length C.size_t, out *C.VooduBuffer) (status C.VooduStatus) {
	defer guard(out, &status)
	var asked struct {
		Block struct {
			Spec map[string]any `json:"spec"`
		} `json:"block"`
	}
	if err := decode(request, length, &asked); err != nil || asked.Block.Spec == nil {
		return reply(out, C.VOODU_STATUS_ERROR, failure{Message: "malformed validate request: no block.spec"})
	}
	if refused := normalise(asked.Block.Spec); refused != nil {
		return reply(out, C.VOODU_STATUS_REFUSED, refused)
	}
	// {"spec": ..., "endpoints": {}}: the workload's first port, by IP.
	return reply(out, C.VOODU_STATUS_OK, map[string]any{"spec": asked.Block.Spec, "endpoints": map[string]any{}})
}

//export goPublish
func goPublish(request *C.uint8_t, length C.size_t, out *C.VooduBuffer) (status C.VooduStatus) {
	defer guard(out, &status)
	var asked struct {
		Generation uint64            `json:"generation"`
		Endpoints  []json.RawMessage `json:"endpoints"`
	}
	if err := decode(request, length, &asked); err != nil {
		return reply(out, C.VOODU_STATUS_ERROR, failure{Message: "malformed publish request: " + err.Error()})
	}
	say(C.VOODU_LOG_INFO, fmt.Sprintf("generation %d: %d replica(s)", asked.Generation, len(asked.Endpoints)))
	return C.VOODU_STATUS_OK
}

//export goDrain
func goDrain(request *C.uint8_t, length C.size_t, out *C.VooduBuffer) (status C.VooduStatus) {
	defer guard(out, &status)
	// Nothing held here: drained at once. Else {"state": "draining",
	// "retry_after_ms": 100} to be asked again.
	return reply(out, C.VOODU_STATUS_OK, map[string]string{"state": "drained"})
}

//export goForget
func goForget(request *C.uint8_t, length C.size_t, out *C.VooduBuffer) (status C.VooduStatus) {
	defer guard(out, &status)
	// Called again for a block already forgotten: never fail then.
	say(C.VOODU_LOG_INFO, "forgot a block")
	return C.VOODU_STATUS_OK
}

// schema is the block's options as a JSON Schema: `vd explain {{name}}`
// shows them, and an option the block gives that is not here is refused at
// apply with the nearest name.
const schema = `{"type":"object","description":"A {{name}} block, made by vd plugins:new.",` +
	`"properties":{"greeting":{"type":"string","default":"` + defaultGreeting + `",` +
	`"description":"A greeting of 1 to 64 bytes."}},"additionalProperties":false}`

//export goDescribe
func goDescribe(out *C.VooduBuffer) (status C.VooduStatus) {
	defer guard(out, &status)
	return reply(out, C.VOODU_STATUS_OK, json.RawMessage(schema))
}

//export goShutdown
func goShutdown() {
	host = nil
}

// main is never run: a c-shared library needs one.
func main() {}

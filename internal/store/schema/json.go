package schema

import (
	"encoding/json"
	"errors"
	"strings"
)

// strictJSON decodes data into v, refusing unknown fields and trailing
// data.
func StrictJSON(data []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

// Package randompicker is random-picker: GIE v1.5.0's picker of the same type (a uniform
// random choice of maxNumOfEndpoints candidates, scores ignored), with the random source owned
// by the instance and seeded from the EPP's seed when one is set (pluginkit.WithSeed). Its
// pick, pickerkit.Uniform (shuffle, keep the first maxNumOfEndpoints), is in the kit because
// weighted-random-picker falls back to it.
package randompicker

import "github.com/pdgate/pdgate/plugins/framework/pickerkit"

// Type is the plugin type name (GIE's).
const Type = "random-picker"

// Kind is random-picker; Kind.New builds one on a given random source.
var Kind = pickerkit.Kind{Type: Type, Pick: pickerkit.Uniform}

// Factory builds the picker; its random source is seeded from the handle's seed, if any.
var Factory = Kind.Factory

package simbench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// LabRecord is a recorded `pdgate lab --workload ... --json` run (config/bench/sim/*.json).
type LabRecord struct {
	Command  string `json:"command"`
	Recorded string `json:"recorded"`
	Topology string `json:"topology"` // topology file, relative to the repository root
	// Workload and Requests name the workload slice the lab ran (first Requests requests).
	Workload    string `json:"workload"`
	Requests    int    `json:"requests"`
	Seed        int64  `json:"seed"`
	Concurrency int    `json:"concurrency"`
	// TimeScale is the topology's (model seconds per wall second); every figure in the
	// record is in model time.
	TimeScale float64 `json:"timeScale"`
	// Components are the run's per-stage means (RecordLab); without them the calibration
	// can only compare the engines alone.
	Components *Components `json:"components,omitempty"`
	// IdleProbes are single requests sent one at a time before the workload, each split into
	// its stages (RecordLab): the data path's costs without queueing.
	IdleProbes []Components `json:"idleProbes,omitempty"`
	Summary    struct {
		RequestsSent int `json:"requestsSent"`
		LatencyMS    struct {
			TTFT labDist `json:"ttft"`
			TPOT labDist `json:"tpot"`
			E2E  labDist `json:"e2e"`
		} `json:"latencyMs"`
	} `json:"summary"`
}

type labDist struct {
	Count         int
	P50, P90, P99 float64
}

// LoadLabRecord reads a recorded lab run.
func LoadLabRecord(path string) (*LabRecord, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lab record: %w", err)
	}
	var r LabRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("lab record %s: %w", path, err)
	}
	switch {
	case r.Topology == "":
		return nil, fmt.Errorf("lab record %s: topology is required", path)
	case r.Workload == "" || r.Requests <= 0:
		return nil, fmt.Errorf("lab record %s: workload and requests (> 0) are required", path)
	case r.Summary.LatencyMS.TTFT.Count == 0:
		return nil, fmt.Errorf("lab record %s: summary.latencyMs.ttft has no requests", path)
	}
	return &r, nil
}

// Calibration compares the simulation with a real-process lab run of the same topology and
// workload slice.
type Calibration struct {
	Record      string      `json:"record"`
	Topology    string      `json:"topology"`
	Workload    string      `json:"workload"`
	Requests    int         `json:"requests"`
	Overheads   Overheads   `json:"overheads"`
	LabTTFT     labDist     `json:"labTTFT"`
	SimTTFT     Dist        `json:"simTTFT"`
	LabTPOTP50  float64     `json:"labTPOTP50"`
	SimTPOTP50  float64     `json:"simTPOTP50"`
	LabE2EP50   float64     `json:"labE2EP50"`
	SimE2EP50   float64     `json:"simE2EP50"`
	ModelOnly   Dist        `json:"modelOnlyTTFT"` // the same run with every overhead at zero
	ErrorP50    float64     `json:"errorP50"`      // (sim - lab) / lab
	Met         bool        `json:"met"`
	Tolerance   float64     `json:"tolerance"`
	SimSummary  Summary     `json:"simSummary"`
	ModelResult *Summary    `json:"modelOnlySummary,omitempty"`
	Profile     string      `json:"profile"`
	Components  *Components `json:"components,omitempty"`
}

// Calibrate runs the recorded lab run's topology and workload slice in virtual time, first
// with the engines alone, then with the data path's overheads derived from the run's own stage
// measurements (over, when non-nil, replaces them), and compares p50 TTFT with the lab's.
func Calibrate(root, recordPath, azurePath string, over *Overheads, tolerance float64) (*Calibration, error) {
	rec, err := LoadLabRecord(recordPath)
	if err != nil {
		return nil, err
	}
	return CalibrateRecord(root, rec, recordPath, azurePath, over, tolerance)
}

// CalibrateRecord is Calibrate on a record already in memory (a fresh RecordLab run).
func CalibrateRecord(root string, rec *LabRecord, name, azurePath string, over *Overheads, tolerance float64) (*Calibration, error) {
	topo, err := lab.LoadTopology(filepath.Join(root, rec.Topology))
	if err != nil {
		return nil, err
	}
	pods, err := FleetFromLab(topo)
	if err != nil {
		return nil, err
	}
	prof := costmodel.Default()
	if topo.SimProfile != "" {
		if prof, err = costmodel.Load(topo.Path(topo.SimProfile)); err != nil {
			return nil, err
		}
	}
	runOnce := func(o Overheads) (*Result, error) {
		// the lab replays the trace at offset/timeScale of wall time, i.e. at the trace's own
		// offsets in model time: virtual time is model time
		gen, err := workload.New(rec.Workload, workload.Options{Model: topo.Model, Seed: rec.Seed,
			AzureConvPath: azurePath, TimeScale: 1})
		if err != nil {
			return nil, err
		}
		s, err := New(Config{Profile: prof, Pods: pods, EPPConfig: topo.Path(topo.EPPConfig), Model: topo.Model,
			Source: NewGeneratorSource(gen, 0, rec.Seed, rec.Requests), Overheads: o, MaxInflight: rec.Concurrency, Seed: rec.Seed})
		if err != nil {
			return nil, err
		}
		return s.Run()
	}
	bare, err := runOnce(Overheads{})
	if err != nil {
		return nil, fmt.Errorf("calibration run, engines alone: %w", err)
	}
	l := rec.Summary.LatencyMS
	var o Overheads
	switch {
	case over != nil:
		o = *over
	case len(rec.IdleProbes) > 0:
		// route and hop: the median idle request's stages (the path's own cost, not the
		// loaded run's contention); step: the real simulator's steps end on wall-clock timers,
		// whose lateness under the run's load shows as the lab's TPOT above the model's
		step := time.Duration(max(l.TPOT.P50-bare.Summary.TPOT.P50, 0) * float64(time.Millisecond))
		o = MedianIdle(rec.IdleProbes).Overheads(step)
	}
	res, err := runOnce(o)
	if err != nil {
		return nil, fmt.Errorf("calibration run: %w", err)
	}
	c := &Calibration{Record: name, Topology: rec.Topology, Workload: rec.Workload, Requests: rec.Requests,
		Overheads: o, LabTTFT: l.TTFT, SimTTFT: res.Summary.TTFT, LabTPOTP50: l.TPOT.P50, SimTPOTP50: res.Summary.TPOT.P50,
		LabE2EP50: l.E2E.P50, SimE2EP50: res.Summary.E2E.P50, ModelOnly: bare.Summary.TTFT, Tolerance: tolerance,
		SimSummary: res.Summary, ModelResult: &bare.Summary, Profile: prof.Name, Components: rec.Components}
	c.ErrorP50 = (c.SimTTFT.P50 - c.LabTTFT.P50) / c.LabTTFT.P50
	c.Met = math.Abs(c.ErrorP50) <= tolerance
	return c, nil
}

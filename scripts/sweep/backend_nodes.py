#!/usr/bin/env python3
"""Sends every ONNX backend node model through quantd and tallies the answers.

Each model in ONNX's backend test data (Debian libonnx-testdata,
/usr/include/onnx/backend/test/data/node) is quantized with `quantctl` by a
running quantd, DYNAMIC_RANGE W8A8 and STATIC_RANGE W8A8 (op set TF); STATIC
calibrates on the model's own test inputs (test_data_set_0), sent as one
batch each (a leading axis of one, `--unbatched`). Every answer's status code
is counted; INTERNAL, UNKNOWN, a crash or a hang is a finding. The manifest it
writes lists the models served, for scripts/sweep/ort_check.js to load in ONNX
Runtime beside the float model.

  /usr/bin/python3 scripts/sweep/backend_nodes.py --server=HOST:PORT --out=DIR
      [--configs=dynamic,static] [--filter=REGEX] [--freeze] [--quantctl=PATH]

--configs takes any of the CONFIGS below: dynamic, static (W8A8, op set
TF), dynamic_w4a8, static_w4a8, static_xla, static_uq, and the weight
algorithms and data-driven passes on every weight (dynamic_all,
static_all, dynamic_w4a8_all, static_xla_all, static_uq_all,
static_w4a8_gptq_b16, static_w4a8_awq_gptq, static_sq_bc_eq,
static_entropy_target, dynamic_gptq_bc).

Prints one JSON line per answer that is not OK and a summary; writes
DIR/manifest.json. scripts/sweep/run.sh starts the server and runs both parts.
"""
import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DATA = '/usr/include/onnx/backend/test/data/node'
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CODES = ('OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
         'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION',
         'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS',
         'UNAUTHENTICATED')
# Answers that are never right for a model ONNX ships as valid.
FINDINGS = ('INTERNAL', 'UNKNOWN', 'CRASH', 'TIMEOUT', 'DATA_LOSS')
# --configs names: (method, precision, op set); STATIC ones calibrate.
CONFIGS = {
    'dynamic': ('dynamic', 'w8a8', 'tf', []),
    'static': ('static', 'w8a8', 'tf', []),
    'dynamic_w4a8': ('dynamic', 'w4a8', 'tf', []),
    'static_w4a8': ('static', 'w4a8', 'tf', []),
    'static_xla': ('static', 'w8a8', 'xla', []),
    'static_uq': ('static', 'w8a8', 'uniform_quantized', []),
    # Weights of any size (the node models' are tiny; with --freeze the
    # passes see them), and the weight algorithms and data-driven passes.
    'dynamic_all': ('dynamic', 'w8a8', 'tf', ['--min_num_elements_for_weights=1']),
    'static_all': ('static', 'w8a8', 'tf', ['--min_num_elements_for_weights=1']),
    'dynamic_w4a8_all': ('dynamic', 'w4a8', 'tf', ['--min_num_elements_for_weights=1']),
    'static_xla_all': ('static', 'w8a8', 'xla', ['--min_num_elements_for_weights=1']),
    'static_uq_all': ('static', 'w8a8', 'uniform_quantized',
                      ['--min_num_elements_for_weights=1']),
    'static_w4a8_gptq_b16': ('static', 'w4a8', 'tf', [
        '--weight_algorithm=gptq', '--block_size=16', '--min_num_elements_for_weights=1']),
    'static_w4a8_awq_gptq': ('static', 'w4a8', 'tf', [
        '--weight_algorithm=awq+gptq', '--min_num_elements_for_weights=1']),
    'static_sq_bc_eq': ('static', 'w8a8', 'tf', [
        '--smoothquant=0.5', '--bias_correction', '--equalize',
        '--min_num_elements_for_weights=1']),
    'static_entropy_target': ('static', 'w8a8', 'tf', [
        '--calibration_method=entropy', '--target_sqnr_db=40',
        '--min_num_elements_for_weights=1']),
    'dynamic_gptq_bc': ('dynamic', 'w8a8', 'tf', [
        '--weight_algorithm=gptq', '--bias_correction', '--min_num_elements_for_weights=1']),
}
# Configs that send the model's test inputs as calibration batches.
def needs_data(cfg):
    return CONFIGS[cfg][0] == 'static' or any(
        a.startswith(('--weight_algorithm', '--bias_correction', '--smoothquant'))
        for a in CONFIGS[cfg][3])


def tensor_inputs(model, case_dir):
    """(name, array) of each graph input fed by test_data_set_0, or a reason."""
    inits = {t.name for t in model.graph.initializer}
    names = [i for i in model.graph.input if i.name not in inits]
    data = os.path.join(case_dir, 'test_data_set_0')
    out = []
    for k, vi in enumerate(names):
        if not vi.type.HasField('tensor_type'):
            return None, 'non-tensor input %r' % vi.name
        if vi.type.tensor_type.elem_type == onnx.TensorProto.BFLOAT16:
            return None, 'bfloat16 input %r (numpy has no such type)' % vi.name
        path = os.path.join(data, 'input_%d.pb' % k)
        if not os.path.exists(path):
            return None, 'no test input %d' % k
        t = onnx.TensorProto()
        with open(path, 'rb') as f:
            t.ParseFromString(f.read())
        try:
            a = numpy_helper.to_array(t)
        except Exception as e:  # noqa: BLE001 - any unreadable test tensor
            return None, 'unreadable test input %d: %s' % (k, e)
        if a.dtype == object or a.dtype.kind in 'USc':
            return None, 'string input %r' % vi.name
        if a.dtype.kind == 'V':
            return None, 'input %r of a type numpy lacks' % vi.name
        out.append((vi.name, a))
    return out, None


def run_quantctl(args, timeout):
    try:
        p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 'TIMEOUT', 'no answer in %d s' % timeout
    if p.returncode == 0:
        return 'OK', ''
    line = (p.stderr.strip().splitlines() or [''])[-1]
    m = re.match(r'([A-Z_]+): (.*)', line)
    if m and m.group(1) in CODES:
        return m.group(1), m.group(2)[:300]
    if p.returncode < 0:
        return 'CRASH', 'quantctl killed by signal %d' % -p.returncode
    return 'CLIENT', line[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--server', required=True)
    ap.add_argument('--out', required=True)
    ap.add_argument('--configs', default='dynamic,static')
    ap.add_argument('--filter', default='')
    ap.add_argument('--quantctl', default=os.path.join(REPO, 'build/client/quantctl'))
    ap.add_argument('--timeout', type=int, default=120)
    ap.add_argument('--freeze', action='store_true',
                    help='every graph input but the first becomes an initializer holding its '
                         'test value (ONNX node models take weights as inputs; frozen, the '
                         'weight passes see them); models with one input are left out')
    a = ap.parse_args()
    configs = [c for c in a.configs.split(',') if c]
    for c in configs:
        if c not in CONFIGS:
            ap.error('unknown config %r (one of %s)' % (c, ', '.join(CONFIGS)))
    os.makedirs(a.out, exist_ok=True)
    cases = sorted(d for d in os.listdir(DATA) if re.search(a.filter, d))
    tally = {c: {} for c in configs}
    manifest = []
    skipped = {}
    for name in cases:
        case_dir = os.path.join(DATA, name)
        model_path = os.path.join(case_dir, 'model.onnx')
        if not os.path.exists(model_path):
            continue
        model = onnx.load(model_path)
        inputs, why = tensor_inputs(model, case_dir)
        work = os.path.join(a.out, name)
        if a.freeze:
            if inputs is None or len(inputs) < 2:
                continue
            for iname, arr in inputs[1:]:
                model.graph.initializer.append(numpy_helper.from_array(arr, iname))
            keep = [i for i in model.graph.input if i.name == inputs[0][0]]
            del model.graph.input[:]
            model.graph.input.extend(keep)
            inputs = inputs[:1]
            # Initializers that are not graph inputs need IR version 4.
            model.ir_version = max(model.ir_version, 4)
            os.makedirs(work, exist_ok=True)
            model_path = os.path.join(work, 'frozen.onnx')
            onnx.save(model, model_path)
        os.makedirs(work, exist_ok=True)
        npys = []
        if inputs is not None:
            for k, (iname, arr) in enumerate(inputs):
                path = os.path.join(work, 'input_%d.npy' % k)
                np.save(path, np.ascontiguousarray(arr[None]))
                npys.append((iname, path))
        for cfg in configs:
            method, precision, op_set, extra = CONFIGS[cfg]
            if needs_data(cfg) and inputs is None:
                skipped[why] = skipped.get(why, 0) + 1
                tally[cfg]['skipped'] = tally[cfg].get('skipped', 0) + 1
                continue
            out = os.path.join(work, 'q_%s.onnx' % cfg)
            if os.path.exists(out):
                os.remove(out)
            args = [a.quantctl, 'quantize', '--server=' + a.server, '--model=' + model_path,
                    '--output=' + out, '--method=%s_range' % method,
                    '--precision=' + precision, '--op_set=' + op_set, '--retries=0',
                    '--timeout=%d' % a.timeout] + extra
            if needs_data(cfg):
                args.append('--unbatched')
                args += ['--calibration_data=%s=%s' % (n, p) for n, p in npys]
            code, msg = run_quantctl(args, a.timeout + 10)
            tally[cfg][code] = tally[cfg].get(code, 0) + 1
            if code != 'OK':
                print(json.dumps({'model': name, 'config': cfg, 'code': code, 'message': msg}),
                      flush=True)
            elif inputs is not None:
                manifest.append({'name': name, 'config': cfg, 'float': model_path,
                                 'quantized': out,
                                 'inputs': [{'name': n, 'npy': p} for n, p in npys]})
    with open(os.path.join(a.out, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps({'summary': tally, 'static_skipped': skipped,
                      'models': len(cases)}), flush=True)
    bad = sum(n for c in tally.values() for k, n in c.items() if k in FINDINGS)
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/python3
"""Realistic inputs for the npm models of the corpus (no download: everything
comes from data sets Debian's scikit-learn ships, or is synthesised here).

Writes into build/corpus/<model>/ (see scripts/corpus/manifest.json for which
model reads which file):

  ppocr_det_v4   calib_x.npy [8,3,320,320], eval_x.npy [8,3,320,320]
                 half photo crops (sklearn's china.jpg / flower.jpg, random
                 crops resized to 320x320), half "pages": lines of digit
                 strings (sklearn digits glyphs upscaled x3, dark ink) on white
                 paper or on a washed-out photo; BGR, (x/255 - mean) / std
                 with PaddleOCR's ImageNet mean/std
  ppocr_rec_v4   calib_x.npy [16,3,48,320], eval_x.npy [24,3,48,320]
                 one text line of 3..9 digits each, resized to height 48, padded
                 right; (x/255 - 0.5) / 0.5 (PaddleOCR rec)
  ppocr_cls_v2   calib_x.npy [16,3,48,192], eval_x.npy [32,3,48,192]
                 text lines, half of them rotated 180 degrees (what the
                 direction classifier decides), same normalisation
  audio          (shared, build/corpus/_audio/) calib_audio.npy [6,48000],
                 eval_audio.npy [8,48000]: 3 s clips at 16 kHz of synthetic
                 speech-like sound (glottal pulse train 90..230 Hz through
                 vowel formant resonators, syllable envelope ~4 Hz, fricative
                 noise bursts) between pauses, over background noise at
                 5..30 dB SNR. derive_inputs.js turns them into the VAD /
                 openWakeWord inputs by running the float models.
  isnet_fp16     calib_x.npy [2,3,1024,1024], eval_x.npy [4,3,1024,1024]:
                 photo crops resized to 1024x1024, (x - 128) / 256 (@imgly's
                 preprocessing); written only when the model was fetched

Deterministic (fixed seed). Run: /usr/bin/python3 scripts/corpus/make_inputs.py [--out DIR]
"""
import argparse
import os
import sys

import numpy as np
from scipy import ndimage, signal
from sklearn.datasets import load_digits, load_sample_images

SEED = 7
SR = 16000


# ---------------------------------------------------------------- images
def glyphs():
    d = load_digits()
    return d.images.astype(np.float32) / 16.0, d.target


def text_line(rng, g, gy, n_digits, height=32, ink=(20, 20, 30)):
    """RGB uint8 image of a line of handwritten digits on white; returns (img, label)."""
    idx = rng.randint(0, len(g), n_digits)
    scale = height / 8.0
    parts = []
    for i in idx:
        gl = np.clip(ndimage.zoom(g[i], scale, order=1), 0, 1)
        parts.append(gl)
        parts.append(np.zeros((gl.shape[0], rng.randint(2, 7)), np.float32))
    line = np.concatenate([np.zeros((height, 6), np.float32)] + parts + [np.zeros((height, 6), np.float32)], 1)
    line = np.pad(line, ((6, 6), (0, 0)))
    alpha = line[..., None]
    paper = np.array([245, 243, 238], np.float32) + rng.normal(0, 4, line.shape + (3,))
    img = paper * (1 - alpha) + np.array(ink, np.float32) * alpha
    return np.clip(img, 0, 255).astype(np.uint8), "".join(str(int(gy[i])) for i in idx)


def resize(img, h, w):
    zh, zw = h / img.shape[0], w / img.shape[1]
    return np.clip(ndimage.zoom(img.astype(np.float32), (zh, zw, 1), order=1), 0, 255)[:h, :w]


def photo_crop(rng, photos, size=320):
    p = photos[rng.randint(len(photos))]
    ch = rng.randint(200, p.shape[0])
    cw = rng.randint(200, p.shape[1])
    y, x = rng.randint(0, p.shape[0] - ch + 1), rng.randint(0, p.shape[1] - cw + 1)
    return resize(p[y:y + ch, x:x + cw], size, size)


def page(rng, photos, g, gy, size=320, on_photo=False):
    if on_photo:
        bg = 0.35 * photo_crop(rng, photos, size) + 0.65 * 235
    else:
        bg = np.full((size, size, 3), 242, np.float32)
    y = rng.randint(8, 30)
    while y < size - 50:
        line, _ = text_line(rng, g, gy, rng.randint(3, 9), height=24)
        h, w = line.shape[:2]
        w = min(w, size - 10)
        x = rng.randint(4, size - w)
        alpha = (line[:, :w].astype(np.float32).mean(2, keepdims=True) < 128).astype(np.float32)
        bg[y:y + h, x:x + w] = bg[y:y + h, x:x + w] * (1 - alpha) + line[:, :w] * alpha
        y += h + rng.randint(8, 30)
    return bg


def det_norm(rgb):
    bgr = rgb[..., ::-1] / 255.0
    mean = np.array([0.485, 0.456, 0.406], np.float32)
    std = np.array([0.229, 0.224, 0.225], np.float32)
    return ((bgr - mean) / std).transpose(2, 0, 1).astype(np.float32)


def rec_norm(rgb, h, w):
    """PaddleOCR rec resize: keep aspect to height h, width <= w, pad right with 0."""
    ratio = rgb.shape[1] / rgb.shape[0]
    rw = min(w, int(np.ceil(h * ratio)))
    r = resize(rgb, h, rw)
    x = (r[..., ::-1] / 255.0 - 0.5) / 0.5
    out = np.zeros((3, h, w), np.float32)
    out[:, :, :rw] = x.transpose(2, 0, 1)
    return out


# ---------------------------------------------------------------- audio
FORMANTS = {  # F1, F2, F3 (Hz) of a few vowels
    "a": (730, 1090, 2440), "e": (530, 1840, 2480), "i": (270, 2290, 3010),
    "o": (570, 840, 2410), "u": (300, 870, 2240),
}


def resonator(x, f, bw):
    r = np.exp(-np.pi * bw / SR)
    th = 2 * np.pi * f / SR
    return signal.lfilter([1 - r], [1, -2 * r * np.cos(th), r * r], x)


def speech(rng, seconds):
    n = int(seconds * SR)
    t = np.arange(n) / SR
    f0 = rng.uniform(90, 230) * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(0.3, 1.2) * t))
    f0 *= 1 + 0.01 * rng.normal(size=n)
    phase = np.cumsum(f0 / SR)
    pulses = (np.diff(np.floor(phase), prepend=0) > 0).astype(np.float64)
    src = signal.lfilter([1], [1, -0.97], pulses)      # glottal roll-off
    out = np.zeros(n)
    syl = int(SR / rng.uniform(3.0, 5.5))
    for s in range(0, n, syl):
        e = min(n, s + syl)
        v = FORMANTS["aeiou"[rng.randint(5)]]
        seg = src[s:e]
        y = sum(resonator(seg, f, 80 + 40 * k) * (0.9 ** k) for k, f in enumerate(v))
        env = np.sin(np.linspace(0, np.pi, e - s)) ** 0.7
        if rng.rand() < 0.4:                            # fricative onset
            k = min(e - s, int(0.05 * SR))
            y[:k] += resonator(rng.normal(size=k), rng.uniform(3000, 6000), 1500) * 3
        out[s:e] = y * env
    return out / (np.abs(out).max() + 1e-9)


def clip(rng, seconds=3.0):
    n = int(seconds * SR)
    x = np.zeros(n)
    pos = int(rng.uniform(0.1, 0.6) * SR)
    while pos < n - int(0.3 * SR):
        dur = rng.uniform(0.4, 1.2)
        s = speech(rng, dur)[: n - pos]
        x[pos:pos + len(s)] += s * rng.uniform(0.3, 0.9)
        pos += len(s) + int(rng.uniform(0.2, 0.8) * SR)
    noise = signal.lfilter([1], [1, -0.9], rng.normal(size=n))
    snr_db = rng.uniform(5, 30)
    p_sig = np.mean(x ** 2) + 1e-9
    noise *= np.sqrt(p_sig / (10 ** (snr_db / 10)) / np.mean(noise ** 2))
    return (x + noise).astype(np.float32)


# ---------------------------------------------------------------- main
def save(d, name, a):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, name), np.ascontiguousarray(a))
    print(f"  {os.path.join(os.path.basename(d), name)} {a.dtype} {list(a.shape)}")


def main():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(repo, "build", "corpus"))
    args = ap.parse_args()
    rng = np.random.RandomState(SEED)
    g, gy = glyphs()
    photos = [im.astype(np.float32) for im in load_sample_images().images]

    def det_set(n):
        imgs = []
        for i in range(n):
            kind = i % 4
            if kind in (0, 2):
                imgs.append(photo_crop(rng, photos))
            else:
                imgs.append(page(rng, photos, g, gy, on_photo=(kind == 3)))
        return np.stack([det_norm(im) for im in imgs])

    d = os.path.join(args.out, "ppocr_det_v4")
    save(d, "calib_x.npy", det_set(8))
    save(d, "eval_x.npy", det_set(8))

    def rec_set(n, w, rotate_half=False):
        xs, labels = [], []
        for i in range(n):
            line, lab = text_line(rng, g, gy, rng.randint(3, 10))
            if rotate_half and i % 2 == 1:
                line = line[::-1, ::-1]
            xs.append(rec_norm(line, 48, w))
            labels.append(lab)
        return np.stack(xs), labels

    d = os.path.join(args.out, "ppocr_rec_v4")
    save(d, "calib_x.npy", rec_set(16, 320)[0])
    x, labels = rec_set(24, 320)
    save(d, "eval_x.npy", x)
    with open(os.path.join(d, "eval_labels.txt"), "w") as f:
        f.write("\n".join(labels) + "\n")

    d = os.path.join(args.out, "ppocr_cls_v2")
    save(d, "calib_x.npy", rec_set(16, 192, rotate_half=True)[0])
    x, _ = rec_set(32, 192, rotate_half=True)
    save(d, "eval_x.npy", x)
    save(d, "eval_y.npy", (np.arange(32) % 2).astype(np.int64))  # 0 upright, 1 rotated 180

    d = os.path.join(args.out, "_audio")
    save(d, "calib_audio.npy", np.stack([clip(rng) for _ in range(6)]))
    save(d, "eval_audio.npy", np.stack([clip(rng) for _ in range(8)]))

    # IS-Net background removal (@imgly): 1024x1024 photo crops, (x - 128) / 256
    # as @imgly's own preprocessing does. Its own generator, so the sets above
    # stay as they were.
    irng = np.random.RandomState(SEED + 1)

    def isnet_set(n):
        return np.stack([((photo_crop(irng, photos, 1024) - 128.0) / 256.0)
                         .transpose(2, 0, 1).astype(np.float32) for _ in range(n)])

    d = os.path.join(args.out, "isnet_fp16")
    if os.path.isdir(d):
        save(d, "calib_x.npy", isnet_set(2))
        save(d, "eval_x.npy", isnet_set(4))

    # The models added on 2026-12-05, each from its own generator so that
    # the sets above stay as they were.
    d = os.path.join(args.out, "ddddocr_rec")
    if os.path.isdir(d):
        drng = np.random.RandomState(SEED + 2)

        def gray_lines(n):
            xs, labels = [], []
            for _ in range(n):
                line, lab = text_line(drng, g, gy, drng.randint(3, 6), height=40)
                gray = resize(line, 64, int(round(line.shape[1] * 64 / line.shape[0])))
                gray = gray.mean(axis=2)[:, :320]
                canvas = np.full((64, 320), 245.0, np.float32)
                canvas[:, :gray.shape[1]] = gray
                xs.append(((canvas / 255.0 - 0.5) / 0.5)[None].astype(np.float32))
                labels.append(lab)
            return np.stack(xs), labels

        save(d, "calib_x.npy", gray_lines(16)[0])
        x, labels = gray_lines(24)
        save(d, "eval_x.npy", x)
        with open(os.path.join(d, "eval_labels.txt"), "w") as f:
            f.write("\n".join(labels) + "\n")

    d = os.path.join(args.out, "ddddocr_det")
    if os.path.isdir(d):
        yrng = np.random.RandomState(SEED + 3)

        def yolo_set(n):
            imgs = []
            for i in range(n):
                im = page(yrng, photos, g, gy, on_photo=(i % 2 == 1)) if i % 4 != 2 \
                    else photo_crop(yrng, photos)
                imgs.append(resize(im, 416, 416).transpose(2, 0, 1))
            return np.stack(imgs).astype(np.float32)

        save(d, "calib_x.npy", yolo_set(8))
        save(d, "eval_x.npy", yolo_set(8))

    d = os.path.join(args.out, "mlsd_tiny")
    if os.path.isdir(d):
        lrng = np.random.RandomState(SEED + 4)

        def drawing(on_photo):
            img = photo_crop(lrng, photos) if on_photo else \
                np.full((320, 320, 3), 240.0, np.float32) + lrng.normal(0, 3, (320, 320, 3))
            yy, xx = np.mgrid[0:320, 0:320].astype(np.float32)
            for _ in range(lrng.randint(4, 12)):
                (x0, y0), (x1, y1) = lrng.uniform(10, 310, (2, 2))
                dx, dy = x1 - x0, y1 - y0
                t = np.clip(((xx - x0) * dx + (yy - y0) * dy) / max(dx * dx + dy * dy, 1e-6), 0, 1)
                dist = np.hypot(xx - (x0 + t * dx), yy - (y0 + t * dy))
                ink = np.clip(1.5 - dist / lrng.uniform(1.0, 2.5), 0, 1)[..., None]
                img = img * (1 - ink) + 20.0 * ink
            rgba = np.concatenate([np.clip(img, 0, 255), np.full((320, 320, 1), 255.0)], 2)
            return (rgba / 127.5 - 1.0).astype(np.float32)

        save(d, "calib_x.npy", np.stack([drawing(i % 2 == 1) for i in range(8)]))
        save(d, "eval_x.npy", np.stack([drawing(i % 2 == 1) for i in range(8)]))

    d = os.path.join(args.out, "blazeface_front")
    if os.path.isdir(d):
        frng = np.random.RandomState(SEED + 5)

        def faces_set(n):
            return np.stack([(resize(photo_crop(frng, photos, 256), 128, 128) / 127.5 - 1.0)
                             .astype(np.float32) for _ in range(n)])

        save(d, "calib_x.npy", faces_set(16))
        save(d, "eval_x.npy", faces_set(16))
    return 0


if __name__ == "__main__":
    sys.exit(main())

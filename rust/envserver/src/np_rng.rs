//! numpy's default random generator, bit for bit: `np.random.default_rng(seed)` (a `PCG64`
//! bit generator seeded through `SeedSequence`) and the `Generator` methods minigrid's level
//! generators call. Worlds built on it match those of minigrid (as gymnasium seeds it,
//! `env.reset(seed=...)`) for the same seed.
//!
//! The algorithms are numpy's documented ones (NEP 19, `numpy.random` docs, O'Neill's PCG
//! paper, Lemire's "Fast random integer generation in an interval"); the unit tests pin
//! outputs taken from numpy 2.x.

/// PCG64's 128-bit LCG multiplier (PCG's default for 128-bit state).
const PCG_MULT: u128 = (0x2360_ED05_1FC6_5DA4 << 64) | 0x4385_DF64_9FCC_F645;

// SeedSequence's hash constants (from O'Neill's `seed_seq_fe`, as numpy uses them).
const INIT_A: u32 = 0x43b0_d7e5;
const MULT_A: u32 = 0x931e_8875;
const INIT_B: u32 = 0x8b51_f9dd;
const MULT_B: u32 = 0x58f3_8ded;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
/// Words in SeedSequence's entropy pool (numpy's default `pool_size`).
const POOL_SIZE: usize = 4;

/// `SeedSequence(entropy).generate_state(n_words, np.uint64)` for a non-negative integer
/// entropy and no spawn key.
pub fn seed_sequence_state(entropy: u128, n_words: usize) -> Vec<u64> {
    let pool = mix_entropy(&int_to_u32_words(entropy));
    let mut hash_const = INIT_B;
    let words32: Vec<u32> = (0..2 * n_words)
        .map(|i| {
            let mut v = pool[i % POOL_SIZE] ^ hash_const;
            hash_const = hash_const.wrapping_mul(MULT_B);
            v = v.wrapping_mul(hash_const);
            v ^ (v >> XSHIFT)
        })
        .collect();
    // Pairs of 32-bit words read as little-endian 64-bit words.
    words32.chunks(2).map(|p| u64::from(p[0]) | (u64::from(p[1]) << 32)).collect()
}

/// An integer as little-endian 32-bit words; zero is one zero word.
fn int_to_u32_words(mut n: u128) -> Vec<u32> {
    let mut words = vec![(n & 0xFFFF_FFFF) as u32];
    n >>= 32;
    while n > 0 {
        words.push((n & 0xFFFF_FFFF) as u32);
        n >>= 32;
    }
    words
}

fn hashmix(value: u32, hash_const: &mut u32) -> u32 {
    let mut v = value ^ *hash_const;
    *hash_const = hash_const.wrapping_mul(MULT_A);
    v = v.wrapping_mul(*hash_const);
    v ^ (v >> XSHIFT)
}

fn mix(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L.wrapping_mul(x).wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

fn mix_entropy(entropy: &[u32]) -> [u32; POOL_SIZE] {
    let mut hash_const = INIT_A;
    let mut pool = [0u32; POOL_SIZE];
    for (i, slot) in pool.iter_mut().enumerate() {
        *slot = hashmix(entropy.get(i).copied().unwrap_or(0), &mut hash_const);
    }
    for src in 0..POOL_SIZE {
        for dst in 0..POOL_SIZE {
            if src != dst {
                let h = hashmix(pool[src], &mut hash_const);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &word in entropy.iter().skip(POOL_SIZE) {
        for slot in pool.iter_mut() {
            let h = hashmix(word, &mut hash_const);
            *slot = mix(*slot, h);
        }
    }
    pool
}

/// numpy's `Generator(PCG64(seed))`: the bit generator's state plus its buffered half word.
#[derive(Debug, Clone)]
pub struct NpRandom {
    state: u128,
    inc: u128,
    /// The upper half of the last 64-bit output, served by the next 32-bit draw.
    spare_u32: Option<u32>,
}

impl NpRandom {
    /// `np.random.default_rng(seed)`, which is also what gymnasium's `reset(seed=seed)`
    /// gives an env.
    pub fn new(seed: u128) -> Self {
        let words = seed_sequence_state(seed, 4);
        let init_state = (u128::from(words[0]) << 64) | u128::from(words[1]);
        let init_seq = (u128::from(words[2]) << 64) | u128::from(words[3]);
        // PCG's `srandom`: the increment is odd; the seed state is added between two steps.
        let mut rng = Self { state: 0, inc: (init_seq << 1) | 1, spare_u32: None };
        rng.step();
        rng.state = rng.state.wrapping_add(init_state);
        rng.step();
        rng
    }

    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// The next 64-bit output (`bit_generator.random_raw()`): XSL-RR of the advanced state.
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        let hi = (self.state >> 64) as u64;
        let lo = self.state as u64;
        (hi ^ lo).rotate_right((self.state >> 122) as u32)
    }

    /// The next 32-bit output: the low half of a fresh 64-bit output, then its high half.
    pub fn next_u32(&mut self) -> u32 {
        if let Some(spare) = self.spare_u32.take() {
            return spare;
        }
        let x = self.next_u64();
        self.spare_u32 = Some((x >> 32) as u32);
        x as u32
    }

    /// `Generator.random()`: a double in `[0, 1)` from the top 53 bits of a 64-bit output.
    pub fn random(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }

    /// `Generator.uniform(low, high)` for scalars.
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.random()
    }

    /// `Generator.integers(low, high)` for Python ints (int64, `high` exclusive):
    /// Lemire's method on 32-bit draws when the span fits in 32 bits, on 64-bit draws
    /// otherwise; an empty-width span (`high == low + 1`) draws nothing.
    pub fn integers(&mut self, low: i64, high: i64) -> i64 {
        assert!(high > low, "NpRandom::integers: empty range {low}..{high}");
        // numpy's "rng" is the inclusive span, high - 1 - low.
        let span = high.wrapping_sub(low).wrapping_sub(1) as u64;
        let offset = if span == 0 {
            0
        } else if span < u64::from(u32::MAX) {
            u64::from(self.lemire_u32(span as u32))
        } else if span == u64::from(u32::MAX) {
            u64::from(self.next_u32())
        } else if span == u64::MAX {
            self.next_u64()
        } else {
            self.lemire_u64(span)
        };
        low.wrapping_add(offset as i64)
    }

    /// Uniform in `0..=span` by Lemire's multiply-shift with rejection (`span < 2^32 - 1`).
    fn lemire_u32(&mut self, span: u32) -> u32 {
        let excl = span + 1;
        let mut m = u64::from(self.next_u32()) * u64::from(excl);
        let mut leftover = m as u32;
        if leftover < excl {
            let threshold = (u32::MAX - span) % excl;
            while leftover < threshold {
                m = u64::from(self.next_u32()) * u64::from(excl);
                leftover = m as u32;
            }
        }
        (m >> 32) as u32
    }

    /// Uniform in `0..=span` by Lemire's method on 64-bit draws (`span < 2^64 - 1`).
    fn lemire_u64(&mut self, span: u64) -> u64 {
        let excl = span + 1;
        let mut m = u128::from(self.next_u64()) * u128::from(excl);
        let mut leftover = m as u64;
        if leftover < excl {
            let threshold = (u64::MAX - span) % excl;
            while leftover < threshold {
                m = u128::from(self.next_u64()) * u128::from(excl);
                leftover = m as u64;
            }
        }
        (m >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_sequence_matches_numpy() {
        // np.random.SeedSequence(s).generate_state(4, np.uint64)
        assert_eq!(
            seed_sequence_state(0, 4),
            [0xdb2cd7e7b0f478be, 0xabf4641a2c71ba49, 0x20c6ed6d9d7b8d41, 0x2c4099de223c39d4]
        );
        assert_eq!(
            seed_sequence_state(12345, 4),
            [0xb5ae6482a03d837c, 0xbbe2996ffa1f7a2f, 0x64e39a9f37158f94, 0x3ebb0f96a013fd73]
        );
    }

    #[test]
    fn raw_outputs_match_numpy() {
        // np.random.PCG64(np.random.SeedSequence(s)).random_raw(3)
        let cases: [(u128, [u64; 3]); 3] = [
            (0, [0xa30febcfd9c2825f, 0x4510bdf882d9d721, 0x0a7d3da94ecde8b8]),
            (1, [0x8306bdf37922e4ff, 0xf35196bbc152a866, 0x24e7a4f608ec18cd]),
            (12345, [0x3a32b18db2ffc19d, 0x51171315c9e4c4de, 0xcc2024823444efd9]),
        ];
        for (seed, want) in cases {
            let mut r = NpRandom::new(seed);
            assert_eq!([r.next_u64(), r.next_u64(), r.next_u64()], want, "seed {seed}");
        }
    }

    /// Draws in the order of `RANGES` (a `None` is `random()`), three rounds per seed.
    const RANGES: [Option<(i64, i64)>; 16] = [
        Some((0, 1)),
        Some((0, 2)),
        Some((0, 3)),
        Some((0, 7)),
        Some((3, 10)),
        Some((0, (1 << 31) + 5)),
        Some((0, 1 << 40)),
        Some((0, 1 << 32)),
        Some((-7, 1 << 33)),
        Some((0, 6)),
        Some((0, 2)),
        None,
        Some((0, 4)),
        Some((1, 6)),
        Some((0, i64::MAX)),
        Some((0, 5)),
    ];

    #[test]
    fn integers_and_random_match_numpy() {
        // Made with numpy 2.4: g = np.random.default_rng(seed); for each round and range,
        // int(g.integers(lo, hi)) or float(g.random()).
        let cases: [(u128, &[i64], &[f64]); 3] = [
            (
                0,
                &[
                    0,
                    1,
                    1,
                    3,
                    4,
                    661058653,
                    18172327443,
                    175979945,
                    6985938159,
                    3,
                    1,
                    3,
                    4,
                    5014055544817598430,
                    2,
                    0,
                    1,
                    0,
                    5,
                    7,
                    846428921,
                    36927730573,
                    3682523327,
                    6267692557,
                    5,
                    0,
                    0,
                    3,
                    2764354270295394587,
                    2,
                    0,
                    0,
                    1,
                    0,
                    3,
                    266896304,
                    737359341826,
                    2257511099,
                    5286117853,
                    3,
                    1,
                    1,
                    5,
                    6323008769749170325,
                    4,
                ],
                &[0.6066357757671799, 0.8631789223498866, 0.997209935789211],
            ),
            (
                1,
                &[
                    0,
                    0,
                    1,
                    5,
                    9,
                    74845286,
                    1043051097810,
                    619160822,
                    2678611771,
                    5,
                    0,
                    1,
                    3,
                    5069107050515594516,
                    0,
                    0,
                    0,
                    2,
                    5,
                    8,
                    1155653967,
                    362543856337,
                    1944245514,
                    2604423747,
                    4,
                    0,
                    1,
                    2,
                    1876543377603957418,
                    2,
                    0,
                    1,
                    0,
                    0,
                    8,
                    133188514,
                    533473118079,
                    1204346445,
                    8424468398,
                    4,
                    1,
                    1,
                    3,
                    2553870588643124188,
                    3,
                ],
                &[0.8277025938204418, 0.13404169724716475, 0.7247899407735336],
            ),
            (
                12345,
                &[
                    0,
                    1,
                    0,
                    5,
                    5,
                    438466541,
                    743549873828,
                    3424658562,
                    3359605453,
                    5,
                    0,
                    0,
                    1,
                    6205079283989499669,
                    3,
                    0,
                    1,
                    2,
                    1,
                    9,
                    2037706761,
                    733635338171,
                    561033803,
                    3795373828,
                    0,
                    0,
                    3,
                    2,
                    6769292498718720008,
                    1,
                    0,
                    1,
                    0,
                    5,
                    3,
                    1597751086,
                    511485281657,
                    1460719171,
                    2288539201,
                    3,
                    1,
                    0,
                    1,
                    845458106164803438,
                    0,
                ],
                &[0.5983087535871898, 0.6974534998820221, 0.1932943892894945],
            ),
        ];
        for (seed, ints, floats) in cases {
            let mut r = NpRandom::new(seed);
            let (mut got_ints, mut got_floats) = (Vec::new(), Vec::new());
            for _ in 0..3 {
                for range in RANGES {
                    match range {
                        Some((lo, hi)) => got_ints.push(r.integers(lo, hi)),
                        None => got_floats.push(r.random()),
                    }
                }
            }
            assert_eq!(got_ints, ints, "seed {seed}");
            assert_eq!(got_floats, floats, "seed {seed}");
        }
    }
}

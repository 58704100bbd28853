// Confidence bounds on a profile's figures: a rung is allowed by what the evidence supports, not
// by a point estimate that a few lucky documents can carry. The unit resampled is the document,
// because the positions of one document (and its several prefix lengths) are not independent.
#pragma once

#include <cstdint>
#include <span>

#include "quality/evaluator.h"
#include "reuse/model_profile.h"

namespace kvc {

// The window's figures over every document (DocumentSums: one per document, over the positions
// it scored in the window), with one-sided bounds at `confidence` (an upper
// bound on the perplexity change and KL, a lower bound on top-1 agreement): percentiles of the
// figures over `resamples` resamples of the documents with replacement. Deterministic (a fixed
// seed), so a profile measured twice on the same input is the same file.
WindowScore BoundedWindowScore(uint32_t tokens, std::span<const DocumentSums> docs, uint32_t resamples,
                               double confidence);

}  // namespace kvc

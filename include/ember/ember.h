// ember's public API in one include: models, plans, training, data and weights.
#pragma once
#include "ember/data.h"
#include "ember/error.h"
#include "ember/io.h"
#include "ember/model.h"
#include "ember/ops.h"
#include "ember/plan.h"
#include "ember/train.h"
